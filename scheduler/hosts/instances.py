"""Per-host instance lists kept current by nova-compute's casts, as nova's HostManager does.

nova-compute tells the schedulers about its instances with three fanout casts (RPC 4.2):
``update_instance_info`` (its whole list at start-up, then one instance at a time),
``delete_instance_info`` (one instance left) and, periodically, ``sync_instance_info`` (the
uuids it has). The tracker applies nova 34's rules to them:

* update, known host: the instances are added and the host's list is trusted (``updated``).
* update, unknown host: more than one instance is a full list and replaces it (trusted);
  one or none is not enough, so the list is re-read from the database (not trusted).
* delete, known host: the uuid is dropped and the list is trusted; unknown host: re-read.
* sync: a uuid set that differs from ours, or an unknown host, re-reads the list (not
  trusted); the same set makes it trusted.

``instances_for(host)`` gives the trusted list, or None when the caller must read the host's
instances from the database itself (nova's ``_get_instance_info``).

"Re-read" calls ``loader(host)``, the host's instance uuids from its cell database (``[]``
for a host with none, None if they cannot be read). Without a loader, or when it gives None
or raises, the host is left untracked (read from the database per request) until it sends a
full list again: never trusted on a guess.

Every change runs under one lock, the loader included, as in nova. Readers take no lock:
a host's entry is an immutable snapshot replaced whole, and ``instances_for`` returns that
read-only snapshot, shared by every request (a caller that adds an instance, as nova's
multi-create does for the ones it places, copies it first). ``trusted_instances`` does the
same for many hosts at once (a server-group request asks it for every candidate).

A host costs the cyclic garbage collector one object (the snapshot's read-only proxy; the
dict behind it holds only strings and None and is not tracked): at 100k hosts the tracker
adds 100k objects to every full collection, not twice as many.

The same casts end this scheduler's own consumption of the instances they name (the driver
passes them on to ``HostManager.release_*``): a deleted instance, one another host has, one
its host no longer lists. That happens whether or not the tracker is on.

``[filter_scheduler] track_instance_changes = False`` turns the tracker off: casts are
ignored and every host is read from the database (nova still applies casts that arrive;
nova-compute sends none when its own option is False).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType

from scheduler.conf import CONF

LOG = logging.getLogger(__name__)

InstanceLoader = Callable[[str], Iterable[str] | None]


def _snapshot(uuids: Iterable[str]) -> Mapping[str, None]:
    """A host's instance uuids as a read-only ``{uuid: None}`` (a new one per change)."""
    return MappingProxyType(dict.fromkeys(uuids))


class InstanceTracker:
    """Which instances each host has, from nova-compute's instance-info casts."""

    def __init__(self, conf=CONF, loader: InstanceLoader | None = None):
        self.enabled: bool = conf.filter_scheduler.track_instance_changes
        self._loader = loader
        # every host we know, and (the same snapshots) the ones the casts keep current
        # ("updated" in nova): a host is in ``_trusted`` only while it is in ``_hosts``
        self._hosts: dict[str, Mapping[str, None]] = {}
        self._trusted: dict[str, Mapping[str, None]] = {}
        self._lock = threading.Lock()

    # -- entries (lock held) -----------------------------------------------------------------
    def _set(self, host: str, uuids: Mapping[str, None], updated: bool) -> None:
        # readers look in ``_trusted`` only: an untrusted entry leaves it first, a trusted
        # one enters it last, so no reader gets a list the casts do not vouch for
        if not updated:
            self._trusted.pop(host, None)
        self._hosts[host] = uuids
        if updated:
            self._trusted[host] = uuids

    def _drop(self, host: str) -> bool:
        self._trusted.pop(host, None)
        return self._hosts.pop(host, None) is not None

    # -- the three casts ------------------------------------------------------------------
    def update_instance_info(self, host: str, instance_uuids: list[str]) -> None:
        """nova-compute sent instances of ``host`` (its whole list, or new ones)."""
        if not self.enabled:
            return
        with self._lock:
            known = self._hosts.get(host)
            if known is not None:
                self._set(host, _snapshot([*known, *instance_uuids]), True)
            elif len(instance_uuids) > 1:
                # only a compute starting up sends several at once: its full list
                self._set(host, _snapshot(instance_uuids), True)
            else:
                self._recreate(host, "an update from an unknown host")

    def delete_instance_info(self, host: str, instance_uuid: str) -> None:
        """An instance left ``host``."""
        if not self.enabled:
            return
        with self._lock:
            known = self._hosts.get(host)
            if known is not None:
                self._set(host, _snapshot(u for u in known if u != instance_uuid), True)
            else:
                self._recreate(host, "a delete from an unknown host")

    def sync_instance_info(self, host: str, instance_uuids: list[str]) -> bool:
        """``host``'s periodic list of its instance uuids; True if ours matched it."""
        if not self.enabled:
            return False
        with self._lock:
            known = self._hosts.get(host)
            if known is None:
                self._recreate(host, "a sync from an unknown host")
                return False
            if known.keys() != set(instance_uuids):
                self._recreate(host, "a sync that did not match")
                return False
            if host not in self._trusted:
                self._set(host, known, True)
            LOG.debug("Successfully synced instances from host '%s'.", host)
            return True

    # -- reading ---------------------------------------------------------------------------
    def instances_for(self, host: str) -> Mapping[str, None] | None:
        """The host's instances as a read-only ``{uuid: None}`` if the casts keep them
        current (a snapshot shared with the tracker: copy it to change it); None when the
        caller must read them from the database."""
        if not self.enabled:
            return None
        # a snapshot: entries are replaced, never changed
        return self._trusted.get(host)

    def trusted_instances(self, hosts: Sequence[str]) -> list[Mapping[str, None] | None]:
        """``instances_for`` of each of ``hosts``, in order, in one C-level pass (a
        server-group request asks for every candidate host)."""
        if not self.enabled:
            return [None] * len(hosts)
        return list(map(self._trusted.get, hosts))

    def seed(self, uuids_by_host: Mapping[str, Iterable[str]]) -> None:
        """Start hosts from a database read (nova's start-up ``_init_instance_info``): not
        trusted until a cast confirms them. Hosts the casts already told us about are kept."""
        if not self.enabled:
            return
        with self._lock:
            for host, uuids in uuids_by_host.items():
                if host not in self._hosts:
                    self._set(host, _snapshot(uuids), False)

    def tracked_hosts(self) -> dict[str, bool]:
        """``{host: updated}`` of every host the tracker knows (for logs and tests)."""
        trusted = self._trusted
        return {host: host in trusted for host in list(self._hosts)}

    # -- helpers (lock held) ---------------------------------------------------------------
    def _recreate(self, host: str, why: str) -> None:
        """Re-read ``host``'s instances from the database: kept, not trusted."""
        uuids = None
        if self._loader is not None:
            try:
                uuids = self._loader(host)
            except Exception as exc:  # a cast has nobody to answer: log, fall back to the DB
                LOG.warning("Could not read the instances of host '%s': %s", host, exc)
        if uuids is None:
            # logged once per host that drops out, not at every cast of an untracked host
            log = LOG.info if self._drop(host) else LOG.debug
            log(
                "Received %s '%s'; its instances will be read from the database per "
                "request until it sends its full list.",
                why,
                host,
            )
            return
        self._set(host, _snapshot(uuids), False)
        LOG.info("Received %s '%s'. Re-created its InstanceList.", why, host)
