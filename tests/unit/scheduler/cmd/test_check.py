"""The pieces of ``novasched-manage check``: masking, aggregation, rendering, the rules, and
the checks that need no service (on SQLite files and temporary config files). The checks
against real services are in tests/functional/test_manage_check.py."""

from __future__ import annotations

import json
import types

import pytest
import sqlalchemy as sa

import db
from db.queries import READ_COLUMNS
from scheduler.cmd import check
from scheduler.cmd.check import CheckContext, CheckResult, Status
from tests.db_rows import compute_node, compute_service
from tests.unit.scheduler.cmd.builders import make_conf

# ------------------------------------------------------------------------------ masking


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        (
            "mysql+pymysql://nova:s3cret@db.example:3306/nova?charset=utf8",
            "mysql+pymysql://nova:***@db.example:3306/nova?charset=utf8",
        ),
        ("mysql+pymysql://root@127.0.0.1:1/nova", "mysql+pymysql://root@127.0.0.1:1/nova"),
        ("sqlite:////var/lib/nova/api.sqlite", "sqlite:////var/lib/nova/api.sqlite"),
        (
            "rabbit://u1:p1@h1:5672,u2:p%40ss@h2:5672/vhost",
            "rabbit://u1:***@h1:5672,u2:***@h2:5672/vhost",
        ),
        ("rabbit://h1:5672,u:p@h2/", "rabbit://h1:5672,u:***@h2/"),
        (
            "postgresql://n@h/db?password=x1y2&sslmode=require",
            "postgresql://n@h/db?password=***&sslmode=require",
        ),
        ("", ""),
        (None, ""),
    ],
)
def test_mask_url_hides_every_password(url, masked):
    assert check.mask_url(url) == masked


def test_errors_are_one_line_with_urls_masked():
    exc = RuntimeError("cannot open mysql://nova:hunter22@h/nova\nsecond line")
    assert check._first_line(exc) == "cannot open mysql://nova:***@h/nova"


# -------------------------------------------------------------------- aggregate, render


def test_exit_status_is_the_worst_result():
    ok = CheckResult.ok("a", "fine")
    warn = CheckResult.warning("b", "hm", "do this")
    fail = CheckResult.failure("c", "bad", "do that")
    assert check.exit_status([]) == 0
    assert check.exit_status([ok, ok]) == 0
    assert check.exit_status([ok, warn]) == 1
    assert check.exit_status([warn, fail, ok]) == 2


def test_table_has_a_row_per_check_and_remedies_only_when_not_ok():
    results = [
        CheckResult("Alpha", Status.OK, "all good", "never shown"),
        CheckResult.warning("Beta", "first line\nsecond line " + "word " * 30, "fix beta"),
        CheckResult.failure("Gamma", "broken", "fix gamma"),
    ]
    text = check.render_table(results)
    lines = text.splitlines()
    assert lines[0].split() == ["Check", "Result", "Details"]
    assert set(lines[1].replace(" ", "")) == {"-"}
    assert lines[2].startswith("Alpha") and "OK" in lines[2] and "all good" in lines[2]
    assert "never shown" not in text
    assert "Remedy: fix beta" in text and "Remedy: fix gamma" in text
    assert max(len(line) for line in lines) <= 5 + 2 + 7 + 2 + check.DETAILS_WIDTH
    assert lines[-1] == "3 checks: 1 OK, 1 WARNING, 1 FAILURE"
    # continuation lines leave the Check and Result columns empty
    beta = lines.index(next(line for line in lines if line.startswith("Beta")))
    assert lines[beta + 1].startswith(" " * 10) and "second line" in lines[beta + 1]


def test_json_document():
    results = [CheckResult.ok("A", "x"), CheckResult.warning("B", "y", "z")]
    as_json = types.SimpleNamespace(format="json", column=None, json=False)
    doc = json.loads(check.emit(results, as_json))
    assert doc == {
        "status": "WARNING",
        "exit_status": 1,
        "checks": [
            {"name": "A", "status": "OK", "details": "x", "remedy": ""},
            {"name": "B", "status": "WARNING", "details": "y", "remedy": "z"},
        ],
    }


def test_a_check_that_raises_is_a_failure_of_that_check(tmp_path):
    calls = []

    @check.check("Exploding")
    def boom(ctx):
        raise KeyError("nope")

    @check.check("Fine")
    def fine(ctx):
        calls.append("fine")
        return CheckResult.ok("Fine", "ok")

    class Bar:
        closed = False

        def __call__(self, *a):
            pass

        def close(self):
            self.closed = True

    bar = Bar()
    ctx = CheckContext(make_conf(tmp_path), progress=bar)
    results = check.run_checks(ctx, [boom, fine])
    assert [r.name for r in results] == ["Exploding", "Fine"]
    assert results[0].status is Status.FAILURE and "KeyError" in results[0].details
    assert results[0].remedy and calls == ["fine"]
    assert bar.closed


def test_every_check_has_a_name():
    assert len({c.check_name for c in check.CHECKS}) == len(check.CHECKS) == 8


# ---------------------------------------------------------------- conflict-retry rule


@pytest.mark.parametrize(
    ("value", "backend", "workers", "status"),
    [
        (1, "mysql", None, Status.OK),
        (0, "postgresql", 4, Status.OK),
        (10, "sqlite", None, Status.OK),
        (10, "mysql", 1, Status.OK),
        (10, "mysql", None, Status.FAILURE),
        (10, "mysql", 4, Status.FAILURE),
        (2, "postgresql", None, Status.FAILURE),
        (10, None, None, Status.WARNING),
    ],
)
def test_conflict_retry_rule(value, backend, workers, status):
    assert check.conflict_retry_status(value, backend, workers) is status


def test_read_placement_config(tmp_path):
    path = tmp_path / "placement.conf"
    path.write_text("[placement_database]\nconnection = postgresql://p:q@h/placement\n")
    assert check.read_placement_config(str(path)) == (10, True, "postgresql://p:q@h/placement")
    path.write_text("[DEFAULT]\ndebug = true\n[placement]\nallocation_conflict_retry_count = 1\n")
    assert check.read_placement_config(str(path)) == (1, False, None)
    path.write_text("[placement]\nallocation_conflict_retry_count = many\n")
    with pytest.raises(ValueError, match="not an integer"):
        check.read_placement_config(str(path))
    with pytest.raises(OSError):
        check.read_placement_config(str(tmp_path / "missing.conf"))


def test_conflict_retries_unreadable_config_is_a_warning(tmp_path):
    ctx = CheckContext(make_conf(tmp_path), placement_config_file=str(tmp_path / "missing.conf"))
    result = check.check_conflict_retries(ctx)
    assert result.status is Status.WARNING
    assert "could not be read" in result.details and "--placement-config-file" in result.remedy
    assert "scheduler worker(s)" in result.details
    ctx.placement_workers = 1
    assert check.check_conflict_retries(ctx).status is Status.OK


def test_conflict_retries_names_the_workers(tmp_path):
    placement = tmp_path / "placement.conf"
    placement.write_text(
        "[placement_database]\nconnection = mysql+pymysql://u:pw99@h/placement\n"
        "[placement]\nallocation_conflict_retry_count = 10\n"
    )
    conf = make_conf(tmp_path, "[scheduler]\nworkers = 3\n[placement]\nclaim_retries = 6\n")
    result = check.check_conflict_retries(CheckContext(conf, placement_config_file=str(placement)))
    assert result.status is Status.FAILURE
    assert "3 novasched scheduler worker(s) ([scheduler] workers)" in result.details
    assert "claim_retries = 6" in result.details
    assert "pw99" not in result.details
    assert (
        str(placement) in result.remedy and "allocation_conflict_retry_count = 1" in result.remedy
    )


# ---------------------------------------------------------------- plugins and options


def test_plugins_ok_and_unknown_names(tmp_path):
    assert check.check_plugins(CheckContext(make_conf(tmp_path))).status is Status.OK
    conf = make_conf(
        tmp_path,
        "[filter_scheduler]\nenabled_filters = ComputeFilter,BogusFilter\n"
        "weight_classes = RAMWeigher,BogusWeigher\n",
    )
    result = check.check_plugins(CheckContext(conf))
    assert result.status is Status.FAILURE
    assert "unknown filter name(s) BogusFilter" in result.details
    assert "unknown weigher name(s) BogusWeigher" in result.details
    assert "Available filters:" in result.remedy and "AllHostsFilter" in result.remedy
    assert "Available weighers:" in result.remedy and "RAMWeigher" in result.remedy


def test_an_enabled_filter_missing_from_available_filters_says_where_to_add_it(tmp_path):
    conf = make_conf(
        tmp_path,
        "[filter_scheduler]\n"
        "available_filters = filters.compute_filter.ComputeFilter\n"
        "enabled_filters = ComputeFilter,RamFilter\n",
    )
    result = check.check_plugins(CheckContext(conf))
    assert result.status is Status.FAILURE
    assert "not among the classes of [filter_scheduler] available_filters: RamFilter" in (
        result.details
    )
    assert "Add each filter's class path to [filter_scheduler] available_filters" in (result.remedy)


def test_driver_old_class_path_warns_and_unknown_driver_fails(tmp_path):
    old = make_conf(tmp_path, "[scheduler]\ndriver = nova.scheduler.chance.ChanceScheduler\n")
    result = check.check_plugins(CheckContext(old))
    assert result.status is Status.WARNING
    assert "it loads chance_scheduler" in result.details
    assert "driver = chance_scheduler" in result.remedy
    bad = make_conf(tmp_path, "[scheduler]\ndriver = nope_scheduler\n")
    result = check.check_plugins(CheckContext(bad))
    assert result.status is Status.FAILURE
    assert "filter_scheduler" in result.remedy and "caching_scheduler" in result.remedy


def test_ignored_options(tmp_path):
    assert check.check_ignored_options(CheckContext(make_conf(tmp_path))).status is Status.OK
    conf = make_conf(tmp_path, "[filter_scheduler]\nsome_future_option = 1\n")
    result = check.check_ignored_options(CheckContext(conf))
    assert result.status is Status.WARNING
    assert "filter_scheduler.some_future_option" in result.details and result.remedy


# ------------------------------------------------------------------------- databases


@pytest.fixture
def sqlite_cloud(tmp_path):
    api_url = f"sqlite:///{tmp_path}/api.db"
    cell_url = f"sqlite:///{tmp_path}/cell.db"
    api = db.get_engine(api_url)
    db.create_schema(api, "api")
    db.create_schema(cell_url, "cell")
    db.ensure_cell0(api, f"sqlite:///{tmp_path}/nowhere_cell0.db")
    db.create_cell_mapping(api, name="cell1", database_connection=cell_url)
    db.create_cell_mapping(
        api, name="off", database_connection=f"sqlite:///{tmp_path}/off.db", disabled=True
    )
    yield api_url, cell_url
    db.dispose_engines()


def test_databases_ok_and_cell0_and_disabled_cells_left_out(tmp_path, sqlite_cloud):
    api_url, _ = sqlite_cloud
    ctx = CheckContext(make_conf(tmp_path, f"[api_database]\nconnection = {api_url}\n"))
    result = check.check_databases(ctx)
    ctx.close()
    assert result.status is Status.OK, result.details
    assert "cell0: not checked" in result.details
    assert "cell off: disabled, not checked" in result.details
    assert [c.name for c in ctx.cells] == ["cell1"]


def test_missing_table_and_columns_are_named(tmp_path, sqlite_cloud):
    api_url, cell_url = sqlite_cloud
    engine = sa.create_engine(cell_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("ALTER TABLE compute_nodes DROP COLUMN stats")
        conn.exec_driver_sql("ALTER TABLE instance_system_metadata RENAME TO other")
    engine.dispose()
    ctx = CheckContext(make_conf(tmp_path, f"[api_database]\nconnection = {api_url}\n"))
    result = check.check_databases(ctx)
    ctx.close()
    assert result.status is Status.FAILURE
    assert "lacks compute_nodes.stats, table instance_system_metadata" in result.details
    assert "nova 34" in result.remedy and "db sync" in result.remedy
    # the compute-node check skips that cell instead of failing on it again
    result = check.check_compute_nodes(ctx)
    assert result.status is Status.WARNING and "cell cell1: skipped" in result.details


def test_missing_sqlite_file_is_not_created(tmp_path):
    missing = tmp_path / "no-such.db"
    ctx = CheckContext(make_conf(tmp_path, f"[api_database]\nconnection = sqlite:///{missing}\n"))
    result = check.check_databases(ctx)
    assert result.status is Status.FAILURE and "does not exist" in result.details
    assert not missing.exists()


def test_unset_api_database(tmp_path):
    ctx = CheckContext(make_conf(tmp_path))
    result = check.check_databases(ctx)
    assert result.status is Status.FAILURE and "[api_database] connection" in result.details
    assert check.check_compute_nodes(ctx).status is Status.WARNING


def test_api_and_cell_tables_split_read_columns():
    assert set(check.API_READ_COLUMNS) | set(check.CELL_READ_COLUMNS) == set(READ_COLUMNS)
    assert "compute_nodes" in check.CELL_READ_COLUMNS and "cell_mappings" in check.API_READ_COLUMNS


# -------------------------------------------------------------------- compute nodes


def test_compute_node_offenders_are_counted_and_the_first_few_named(tmp_path, sqlite_cloud):
    api_url, cell_url = sqlite_cloud
    engine = sa.create_engine(cell_url)
    with engine.begin() as conn:
        for i in range(8):
            conn.execute(db.models.compute_nodes.insert().values(compute_node(f"u{i}", f"h{i}")))
        conn.execute(db.models.services.insert().values(compute_service("h0")))
    engine.dispose()
    ctx = CheckContext(make_conf(tmp_path, f"[api_database]\nconnection = {api_url}\n"))
    assert check.check_databases(ctx).status is Status.OK
    # a stand-in for the client the Placement check leaves (this is a unit test of check.py)
    ctx.placement = types.SimpleNamespace(
        timeout=5.0, list_providers=lambda: [{"uuid": "u0"}, {"uuid": "u1"}]
    )
    result = check.check_compute_nodes(ctx)
    ctx.close()
    assert result.status is Status.FAILURE
    assert "cell cell1: 6 of 8 compute node(s) have no resource provider" in result.details
    assert "h2 (node h2, uuid u2)" in result.details and "and 1 more" in result.details
    assert "cell cell1: 7 of 8 compute node(s) have no nova-compute service record" in (
        result.details
    )
    assert "Restart nova-compute" in result.remedy and "soft-delete" in result.remedy
    assert ctx.placement.timeout == check.LIST_PROVIDERS_TIMEOUT


# --------------------------------------------------------------- Placement and broker


def test_placement_options_that_make_no_client(tmp_path):
    ctx = CheckContext(make_conf(tmp_path, "[placement]\nauth_type = noauth2\n"))
    result = check.check_placement(ctx)
    assert result.status is Status.FAILURE
    assert "endpoint_override" in result.details and "auth_type" in result.remedy
    assert ctx.placement is None


@pytest.mark.parametrize(
    ("text", "mv"), [("1.39", (1, 39)), ("1.4", (1, 4)), ("", None), ("v1", None)]
)
def test_microversion_parsing(text, mv):
    assert check._microversion(text) == mv


def test_broker_fake_and_other_drivers(tmp_path):
    fake = check.check_broker(
        CheckContext(make_conf(tmp_path, "[DEFAULT]\ntransport_url = fake://\n"))
    )
    assert fake.status is Status.OK and "in-process" in fake.details
    kafka = make_conf(tmp_path, "[DEFAULT]\ntransport_url = kafka://u:kpw@h:9092/\n")
    result = check.check_broker(CheckContext(kafka))
    assert result.status is Status.WARNING and "not checked" in result.details
    assert "kafka://u:***@h:9092/" in result.details and result.remedy


# ---------------------------------------------------------------- Placement's candidate options


def test_candidate_options_are_confirmed_against_placements_config(tmp_path):
    placement = tmp_path / "placement.conf"
    placement.write_text("[placement]\nallocation_conflict_retry_count = 1\n")
    view_on = "[placement]\nview_feed = api\n"
    ctx = CheckContext(make_conf(tmp_path, view_on), placement_config_file=str(placement))
    result = check.check_candidate_options(ctx)
    assert result.status is Status.OK, result.details  # both at Placement's defaults
    placement.write_text(
        "[placement]\nmax_allocation_candidates = 100000\n"
        "allocation_candidates_generation_strategy = breadth-first\n"
    )
    result = check.check_candidate_options(ctx)
    assert result.status is Status.WARNING
    assert "Placement's max_allocation_candidates = 100000" in result.details
    assert "max_allocation_candidates = 100000" in result.remedy
    assert "allocation_candidates_generation_strategy = breadth-first" in result.remedy
    same = view_on + (
        "max_allocation_candidates = 100000\n"
        "allocation_candidates_generation_strategy = breadth-first\n"
    )
    ctx = CheckContext(make_conf(tmp_path, same), placement_config_file=str(placement))
    assert check.check_candidate_options(ctx).status is Status.OK


def test_candidate_options_that_cannot_be_confirmed_are_a_warning(tmp_path):
    conf = make_conf(tmp_path, "[placement]\nview_feed = api\n")
    ctx = CheckContext(conf, placement_config_file=str(tmp_path / "missing.conf"))
    result = check.check_candidate_options(ctx)
    assert result.status is Status.WARNING
    assert "cannot be confirmed" in result.details and "--placement-config-file" in result.remedy
    # without the provider view, Placement answers every query: nothing to confirm
    ctx = CheckContext(make_conf(tmp_path), placement_config_file=str(tmp_path / "missing.conf"))
    assert check.check_candidate_options(ctx).status is Status.OK
