"""Where host-change notices come from.

Rank 0 polls a source at every `State.check_host_updates()` and broadcasts
what it found, so every rank decides from rank 0's view together. The source
is pluggable: under the elastic driver (tfringrun --min-np ...) rank 0's
first poll installs tf_ring.elastic.notices' source, which asks the driver's
control service for new notices over the job's authenticated control
channel (tf_ring.elastic.control_client); tests install one that injects a
notice. With none installed rank 0 reports no change (the broadcast still
runs, so the collective pattern does not depend on it).
"""
_source = None
_from_environment_checked = False


def set_host_update_source(source):
    """Installs `source()`, called on rank 0 only, returning an iterable of
    (timestamp, HostUpdateResult) notices that arrived since its last call.
    None removes it."""
    global _source, _from_environment_checked
    _from_environment_checked = True  # an explicit choice wins over the environment
    if source is not None and not callable(source):
        raise TypeError("set_host_update_source() takes a function or None, got %r"
                        % type(source).__name__)
    _source = source


def poll_host_updates():
    """The notices the installed source has, as a list (empty without one)."""
    global _source, _from_environment_checked
    if not _from_environment_checked:
        from tf_ring.elastic.notices import source_from_environment
        _source, _from_environment_checked = source_from_environment(), True
    return list(_source()) if _source is not None else []
