"""Jobs hosted by a cluster framework (Spark, Ray): tfringrun's machinery
reaching hosts through the framework's own tasks instead of ssh.

Every host of the job runs a TaskService inside one of the framework's
tasks (a Spark barrier task, a Ray actor). The driver runs tfringrun with
made-up host names and an rsh agent (rsh_agent) that asks the host's task
service to start Open MPI's daemon there; the ranks then run rank_entry,
which fetches the user's function from the driver's FunctionService and
returns its result the same way. job.run_function ties these together.
Every connection proves the per-job secret for the service it reaches
first, and every frame after that is sealed (tf_ring.plumbing). See
docs/spark-ray-kubernetes.md and docs/security.md."""
