"""The shared floor below the launcher and the jobs: wire protocol, channel authentication, endpoints."""
