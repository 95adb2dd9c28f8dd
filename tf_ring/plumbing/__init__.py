"""The shared floor below the launcher and the jobs: wire, channel authentication, endpoints."""
