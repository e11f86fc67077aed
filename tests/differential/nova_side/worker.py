"""nova 34's side of the differential tests (tests/differential/harness.py), run under nova's
own venv: one JSON request per line on stdin ({"area", "op", "payload"}), one JSON answer per
line on stdout ({"result": ...}, or {"crash": traceback} when the handler itself failed).

Each area is a module beside this one, ``diff_<area>.py``, whose ``OPS`` maps an op name to a
function of the payload. A refusal by nova's function is a result the handler returns (for
example ``{"error": "InvalidRequest", ...}``), not a crash.
"""

import importlib
import json
import sys
import traceback
from pathlib import Path


def _init_nova():
    import nova.conf
    from nova import objects

    conf = nova.conf.CONF
    conf([], project="nova", default_config_files=[])
    objects.register_all()
    return conf


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    conf = _init_nova()
    areas = {}
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            msg = json.loads(line)
            area = msg["area"]
            if area not in areas:
                areas[area] = importlib.import_module(f"diff_{area}")
                setup = getattr(areas[area], "setup", None)
                if setup is not None:
                    setup(conf)
            result = areas[area].OPS[msg["op"]](msg["payload"])
            answer = {"result": result}
        except Exception:
            answer = {"crash": traceback.format_exc()}
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
