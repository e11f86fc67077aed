"""Build the Placement client from the ``[placement]`` options, as nova's report client does.

``auth_type = noauth2`` (with ``endpoint_override``) talks to a Placement that runs
``[api] auth_strategy = noauth2`` with a plain ``X-Auth-Token``; any keystoneauth plugin
(``password``, ``v3password``, ``admin_token`` ...) goes through a keystoneauth Adapter, which
finds the endpoint in the Keystone catalog by service type, interface and region.
"""

from __future__ import annotations

from keystoneauth1 import loading as ks_loading

from placement_client.api import PlacementClient
from placement_client.view import ApiFeed, DatabaseFeed, ProviderView, ViewRefresher
from placement_client.view.search import SearchOptions
from scheduler.conf import CONF
from scheduler.exceptions import ConfigurationError

GROUP = "placement"


def client_from_conf(conf=CONF) -> PlacementClient:
    opts = conf[GROUP]
    timeout = opts.timeout or 30.0
    auth_type = opts.auth_type
    if auth_type in (None, "", "noauth2", "none", "noauth"):
        if not opts.endpoint_override:
            raise ConfigurationError(
                "[placement] endpoint_override must be set when auth_type is "
                f"{auth_type or 'unset'} (e.g. endpoint_override = http://127.0.0.1:8778)"
            )
        token = opts.noauth2_user if auth_type in (None, "", "noauth2") else None
        return PlacementClient(
            opts.endpoint_override,
            token=token,
            timeout=timeout,
            claim_retries=opts.claim_retries,
            retry_backoff=opts.claim_retry_backoff,
            coalesce_candidates=opts.coalesce_candidate_queries,
        )
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, GROUP)
        session = ks_loading.load_session_from_conf_options(conf, GROUP, auth=auth)
        adapter = ks_loading.load_adapter_from_conf_options(conf, GROUP, session=session, auth=auth)
    except Exception as exc:  # keystoneauth raises several unrelated types for bad config
        raise ConfigurationError(f"Invalid [placement] authentication options: {exc}") from exc
    return PlacementClient(
        opts.endpoint_override or "",
        ks_adapter=adapter,
        timeout=timeout,
        claim_retries=opts.claim_retries,
        retry_backoff=opts.claim_retry_backoff,
        coalesce_candidates=opts.coalesce_candidate_queries,
    )


def search_options(conf=CONF) -> SearchOptions:
    """Placement's options that change its answer, as novasched's [placement] repeats them."""
    opts = conf[GROUP]
    return SearchOptions(
        max_allocation_candidates=opts.max_allocation_candidates,
        allocation_candidates_generation_strategy=opts.allocation_candidates_generation_strategy,
    )


def view_from_conf(conf=CONF, client: PlacementClient | None = None) -> ViewRefresher | None:
    """The provider view and its refresher for ``[placement] view_feed`` (None: no view).
    Nothing is read yet: ``ViewRefresher.load`` / ``start`` do that."""
    opts = conf[GROUP]
    feed_name = opts.view_feed
    if feed_name == "none":
        return None
    if feed_name == "auto":
        # the API feed is opt-in: it cannot be proven current for each request cheaply
        if not opts.view_database_connection:
            return None
        feed_name = "database"
    view = ProviderView(max_age=opts.view_max_age, search=search_options(conf))
    if feed_name == "database":
        if not opts.view_database_connection:
            raise ConfigurationError(
                "[placement] view_feed = database needs [placement] view_database_connection "
                "(the SQLAlchemy URL of Placement's database, read-only)"
            )
        try:
            feed = DatabaseFeed(opts.view_database_connection)
        except Exception as exc:  # a malformed URL or a missing driver
            raise ConfigurationError(
                f"[placement] view_database_connection is not usable: {exc}"
            ) from exc
    else:
        feed = ApiFeed(client or client_from_conf(conf), sweep_period=opts.view_sweep_period)
    return ViewRefresher(view, feed, interval=opts.view_refresh_interval)
