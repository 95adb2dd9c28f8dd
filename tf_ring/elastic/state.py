"""State and ObjectState: what elastic training saves, restores and syncs.

commit() = save() in memory + check_host_updates(); restore() goes back to
the last save; sync() makes every rank equal to rank 0 and saves that.
"""
import copy
import queue

import tensorflow as tf

from tf_ring.runtime.basics import rank
from tf_ring.elastic import restart
from tf_ring.elastic.errors import HostUpdateResult, HostsUpdatedInterrupt
from tf_ring.elastic.hosts import poll_host_updates
from tf_ring.collectives.objects import _run_eagerly, broadcast_object
from tf_ring.collectives.ops import broadcast


def _broadcast_from_root(obj):
    return broadcast_object(obj, root_rank=0, name="elastic.object_state")


class State:
    """The base of every elastic state: subclasses say what save(), restore()
    and sync() do; this class handles host-change notices and reset callbacks.

    bcast_object(obj) -> rank 0's obj, get_rank() -> this rank: Horovod's
    constructor arguments, defaulting to tf_ring's.
    """

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or _broadcast_from_root
        self._get_rank = get_rank or rank
        self._host_messages = queue.Queue()
        self._last_updated_timestamp = 0.0
        self._reset_callbacks = []

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments, in order) after every reset, e.g.
        to rescale the learning rate to the new number of ranks."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        """Called by `run` after the engine reset: drops notices that the
        reset has answered, then runs reset() and the reset callbacks."""
        self._host_messages = queue.Queue()
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        """A host-change notice (Horovod's listener method). Only rank 0's
        notices count: check_host_updates() broadcasts rank 0's view."""
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state in memory, then raises HostsUpdatedInterrupt on
        every rank if rank 0 learned of a host change. A collective: every
        rank commits at the same point."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank together when rank 0 has
        a notice newer than the last one acted on. A collective (one small
        broadcast from rank 0), also when nothing changed."""
        newest, update = self._last_updated_timestamp, HostUpdateResult.no_update
        notices = []
        while not self._host_messages.empty():
            notices.append(self._host_messages.get())
        if self._get_rank() == 0:
            for timestamp, result in notices + poll_host_updates():
                if timestamp > self._last_updated_timestamp:
                    newest = max(newest, timestamp)
                    update |= HostUpdateResult(result)
        decided = _run_eagerly(lambda: broadcast(
            tf.constant([newest, float(update)], tf.float64), 0, name="elastic.host_updates"))
        newest, update = float(decided[0]), HostUpdateResult(int(decided[1]))
        if newest > self._last_updated_timestamp:
            self._last_updated_timestamp = newest
            raise HostsUpdatedInterrupt(skip_sync=update == HostUpdateResult.removed)

    def save(self):
        raise NotImplementedError("%s.save()" % type(self).__name__)

    def restore(self):
        raise NotImplementedError("%s.restore()" % type(self).__name__)

    def sync(self):
        raise NotImplementedError("%s.sync()" % type(self).__name__)

    def reset(self):
        """Hook for subclasses: called on every reset before the callbacks."""


def _copied(value):
    """A deep copy, so that changing a committed list or dict in place does
    not change the commit; objects that cannot be copied are kept as they are."""
    try:
        return copy.deepcopy(value)
    except Exception:  # noqa: BLE001 (locks, sessions, iterators: keep the reference)
        return value


class ObjectState(State):
    """Plain Python attributes, given as keyword arguments: `state.epoch`.

    save() keeps a copy of each attribute, restore() puts the copies back,
    sync() makes every rank's attributes equal rank 0's (by broadcast_object)
    and saves them.
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        for name in kwargs:
            if name.startswith("_") or hasattr(type(self), name):
                raise ValueError("%s: the attribute name %r is taken by the state itself; "
                                 "choose another name" % (type(self).__name__, name))
        self._saved_state = {name: _copied(value) for name, value in kwargs.items()}
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {name: _copied(getattr(self, name)) for name in self._saved_state}
        restart.mirror_commit(self._mirror_snapshot)

    def _mirror_snapshot(self):
        return {"attributes": self._saved_state}  # a fresh dict at each save

    def _load_mirror(self, snapshot):
        self._saved_state = snapshot["attributes"]
        self._set_attrs()

    def restore(self):
        self._set_attrs()

    def sync(self):
        mirrored = restart.take_mirror_once()
        if mirrored is not None:
            self._load_mirror(mirrored)
        if self._saved_state:
            current = {name: getattr(self, name) for name in self._saved_state}
            self._saved_state = {name: _copied(value)
                                 for name, value in self._bcast_object(current).items()}
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, _copied(value))

