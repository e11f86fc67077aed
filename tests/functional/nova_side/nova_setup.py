"""What every nova-side script does first, as a nova service does at start-up: parse an empty
nova.conf, point oslo.messaging at the test's broker and exchange, and set up nova's RPC and
objects. Runs under nova 34's own venv (the scripts beside it import it by name)."""

from typing import Any


def init_nova(args: dict[str, Any], **overrides: Any) -> Any:
    """nova's CONF, ready for nova's RPC clients; ``overrides`` are ``name=(group, value)``."""
    import nova.conf
    from nova import objects, rpc

    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[])
    # oslo.messaging registers these options when it makes a transport; set them first
    from oslo_messaging import transport as om_transport

    conf.register_opts(om_transport._transport_opts)
    conf.set_override("transport_url", args["transport_url"])
    conf.set_override("control_exchange", args["exchange"])  # a test-only exchange
    for name, (group, value) in overrides.items():
        conf.set_override(name, value, group=group)
    rpc.init(conf)
    objects.register_all()
    return conf


def nova_context(args: dict[str, Any]) -> Any:
    """nova's RequestContext of the test's user, project and request id."""
    from nova import context

    return context.RequestContext(
        user_id=args["user_id"], project_id=args["project_id"], request_id=args["request_id"]
    )


def nova_flavor(name: str, vcpus: int = 1, memory_mb: int = 512, root_gb: int = 1) -> Any:
    """A nova Flavor as nova-api loads one (no extra specs)."""
    from nova import objects

    return objects.Flavor(
        id=1,
        flavorid="42",
        name=name,
        vcpus=vcpus,
        memory_mb=memory_mb,
        root_gb=root_gb,
        ephemeral_gb=0,
        swap=0,
        rxtx_factor=1.0,
        vcpu_weight=0,
        disabled=False,
        is_public=True,
        extra_specs={},
        description=None,
    )
