"""tfringrun's coordinated restart: the ranks' half and the driver agree on
the exit code that means 'relaunch at the new size'."""
from tf_ring.elastic import restart
from tf_ring.run import elastic_plan


def test_exit_codes_agree():
    assert restart.EXIT_HOSTS_UPDATED == elastic_plan.EXIT_HOSTS_UPDATED
