"""Launcher tier: tfringrun jobs on this one host (failures, signals, elastic
restarts and recovery, heartbeats, timeline and logging end to end)."""
