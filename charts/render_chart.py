"""Renders the chart as `helm install` does, for the Rust installer of the test rig
(devkit/devstack/src/chart.rs), with the same pinned Helm SDK as check_chart.py
(charts/requirements.txt: helm-python-sdk bundles Helm's Go engine).

Reads one JSON object on stdin: {"chart": DIR, "release": NAME, "namespace": NS,
"values": {...}}; prints a JSON list of {"source": TEMPLATE, "object": MANIFEST}, the
templates in path order (NOTES.txt and empty documents left out), as Helm splits them
before sorting by kind. Hooks (manifests annotated `helm.sh/hook`, such as the `helm test` pod of
templates/tests/) are in the list as Helm renders them: the installer keeps them out of the
release and runs the test hooks only when asked, as `helm test` does. A refusal (a failed schema or template `fail`) exits 1 with
Helm's message on stderr.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path


def main() -> int:
    import helm_python as helm
    import yaml

    logging.getLogger("helm_python.native").addHandler(logging.NullHandler())
    logging.getLogger("helm_python.native").propagate = False
    helm.enable_logging(logging.CRITICAL)
    request = json.load(sys.stdin)
    chart = helm.Chart.load(Path(request["chart"]))
    try:
        out = chart.render(
            request["values"], name=request["release"], namespace=request["namespace"], is_install=True
        )
    except helm.HelmError as err:
        print(str(err), file=sys.stderr)
        return 1
    docs = []
    for path in sorted(out):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(out[path]):
            if doc:
                docs.append({"source": path, "object": doc})
    json.dump(docs, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
