"""A trivial area: proves the worker answers with nova's own objects loaded."""


def _version(payload):
    import nova.version

    return {"nova": nova.version.version_string(), "echo": payload}


OPS = {"version": _version}
