"""A HostTable column built on first use (the first request that needs it waits for the
build): one pass over the hosts, with the same values as asking each host."""

from __future__ import annotations

import math
import time

import numpy as np

from scheduler.hosts.table import HostTable
from tests.unit.filters.fakes import make_host


def _ram_or_raise(host):
    if host.host == "broken":
        raise RuntimeError("cannot read this one")
    return host.free_ram_mb


def _arch(host):
    return (host.stats or {}).get("cpu_arch", "absent")


def _table(names: list[str]) -> tuple[HostTable, list]:
    table = HostTable(capacity=2)  # grows while the hosts are added
    hosts = []
    for i, name in enumerate(names):
        host = make_host(name, free_ram_mb=1000 + i, stats={"cpu_arch": f"arch{i % 2}"})
        table.add(host)
        hosts.append(host)
    return table, hosts


def test_a_numeric_column_is_every_hosts_value():
    table, hosts = _table([f"h{i}" for i in range(50)])
    column = table.numeric("ram", _ram_or_raise)
    assert column[table.rows_of(hosts)].tolist() == [float(h.free_ram_mb) for h in hosts]
    assert column.dtype == np.float64 and len(column) >= table.size


def test_a_host_whose_value_raises_is_nan_and_the_others_are_read():
    table, hosts = _table(["a", "broken", "c"])
    column = table.numeric("ram", _ram_or_raise)
    values = column[table.rows_of(hosts)].tolist()
    assert values[0] == 1000.0 and math.isnan(values[1]) and values[2] == 1002.0


def test_a_column_made_after_a_host_was_let_go_asks_only_the_hosts_left():
    table, hosts = _table(["a", "b", "c"])
    table.release(hosts[1])
    table.collect(now=time.monotonic() + HostTable.RELEASE_DELAY + 1)
    column = table.numeric("ram", _ram_or_raise)
    assert column[table.rows_of([hosts[0], hosts[2]])].tolist() == [1000.0, 1002.0]
    assert math.isnan(column[1])  # the empty row
    codes, values = table.codes("arch", _arch, lambda v: v)
    assert [values[c] for c in codes[table.rows_of([hosts[0], hosts[2]])]] == ["arch0", "arch0"]
    assert codes[1] == -1  # the empty row has no value (_arch(None) raises)


def test_a_code_column_is_every_hosts_code():
    table, hosts = _table([f"h{i}" for i in range(7)])
    codes, values = table.codes("arch", _arch, lambda v: v)
    assert [values[c] for c in codes[table.rows_of(hosts)]] == [_arch(h) for h in hosts]
    assert values == ["arch0", "arch1"]
    # a value that cannot be a key: -1 for that host (ask the host)
    unhashable, _ = table.codes("stats", lambda h: h.stats, lambda v: v)
    assert unhashable[table.rows_of(hosts)].tolist() == [-1] * 7
