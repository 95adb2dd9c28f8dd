"""Where host-change notices come from.

Rank 0 polls a source at every `State.check_host_updates()` and broadcasts
what it found, so every rank decides from rank 0's view together. The source
is pluggable: the elastic launcher will install one later; tests install
one that injects a notice. With none installed rank 0 reports no change (the
broadcast still runs, so the collective pattern does not depend on it).
"""
_source = None


def set_host_update_source(source):
    """Installs `source()`, called on rank 0 only, returning an iterable of
    (timestamp, HostUpdateResult) notices that arrived since its last call.
    None removes it."""
    global _source
    if source is not None and not callable(source):
        raise TypeError("set_host_update_source() takes a function or None, got %r"
                        % type(source).__name__)
    _source = source


def poll_host_updates():
    """The notices the installed source has, as a list (empty without one)."""
    return list(_source()) if _source is not None else []
