#!/usr/bin/env python3
"""Checks of the tcab-dispatcher Helm chart.

Renders and lints the chart with Helm's own engine (the Go SDK bundled in the
PyPI package helm-python-sdk), validates every rendered manifest with
kubernetes-validate in strict mode (the PodMonitor, a custom resource that
package has no schema for, gets a structural check instead), asserts the
structure the dispatcher relies on, checks the Grafana dashboard against
docs/metrics.md, runs promtool's check and unit tests on the alert rules as rendered
(tests/alerts.test.yaml; a SKIP line without promtool), checks each container's environment and the chart's documented
defaults against the binaries' declared variables (charts/settings.json, rendered
from shared/src/config/vars.rs), compares the dispatcher Role with a golden file
the e2e tests load into the simulated cluster's RBAC mode, holds the `helm test`
hook (templates/tests/check.yaml) to the admitter container it stands in for, and
checks the root Dockerfile (charts/check_image.py).

Usage (from anywhere; paths are relative to this file):

    python3 -m venv .venv-chart
    .venv-chart/bin/pip install -r charts/requirements.txt
    .venv-chart/bin/python charts/check_chart.py [--update-golden] [-k SUBSTRING]

Prints one line per check (PASS, FAIL or SKIP) and a final
"N passed, N failed, N skipped" line; exits 1 when any check failed.
Everything runs offline.
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_image  # noqa: E402  (the sibling module of the Dockerfile checks)
import check_release  # noqa: E402  (the sibling module of the version checks)

CHART = HERE / "tcab-dispatcher"
GOLDEN = CHART / "tests" / "role.golden.yaml"
README = CHART / "README.md"
VALUES = CHART / "values.yaml"
# Values documented as a whole rather than key by key.
VALUE_GROUPS = {
    "podSecurityContext",
    "resources.admitter",
    "resources.leaseKeeper",
    "resources.reaper",
    "metrics.livenessProbe",
    "metrics.readinessProbe",
    "metrics.dashboard.labels",
}
REPO = HERE.parent
DASHBOARD = CHART / "dashboards" / "tcab-dispatcher.json"
METRICS_DOC = REPO / "docs" / "metrics.md"
# The recorded footprint figures (docs/performance.md): each container's default memory
# limit must hold its last recorded peak at the documented scale with this headroom.
FIGURES = REPO / "docs" / "performance" / "figures.tsv"
MEMORY_SCALE_JOBS = 100000
MEMORY_HEADROOM = 1.5
# Every environment variable the binaries read, as their declarations describe it
# (written by shared/tests/it/settings_docs.rs, which fails when it is stale).
SETTINGS_JSON = HERE / "settings.json"

RELEASE = "tcab-dispatcher"
NAMESPACE = "tcab"
SANDBOX_NS = "tcab-sandboxes"

CONTAINERS = {
    "admitter": "tcab-admitter",
    "lease-keeper": "tcab-lease-keeper",
    "reaper": "tcab-reaper",
}

# (apiGroup, resource, verb): exactly what the spec grants the dispatcher, and the
# list of events that tells a Job whose pods the API server refuses (the Job
# controller's FailedCreate Events; the chart README says why).
DISPATCHER_RULES = {
    *(("batch", "jobs", v) for v in ("create", "get", "list", "watch", "delete")),
    *(("", "pods", v) for v in ("get", "list", "delete")),
    ("", "pods/log", "get"),
    ("", "events", "list"),
    ("events.k8s.io", "events", "create"),
}
SANDBOX_RULES = {("", "pods", v) for v in ("get", "list", "delete")}

METRICS_ADDR = "TCAB_DISPATCHER_METRICS_ADDR"
# Environment each container gets when only the required values are set.
DEFAULT_ENV = {
    "admitter": {
        "POD_NAMESPACE",
        "TCAB_BACKEND_URL",
        "TCAB_BACKEND_SERVICE_TOKEN",
        "TCAB_DRIVER_IMAGE",
        "TCAB_DRIVER_MANAGED_BY",
        "TCAB_DISPATCHER_LOG_FORMAT",
        "RUST_LOG",
        METRICS_ADDR,
    },
    "lease-keeper": {
        "POD_NAMESPACE",
        "TCAB_BACKEND_URL",
        "TCAB_BACKEND_SERVICE_TOKEN",
        "TCAB_DISPATCHER_LOG_FORMAT",
        "RUST_LOG",
        METRICS_ADDR,
    },
    # The orphan sweep is on by default: it asks the backend what it drives.
    "reaper": {
        "POD_NAMESPACE",
        "TCAB_BACKEND_URL",
        "TCAB_BACKEND_SERVICE_TOKEN",
        "TCAB_K8S_NAMESPACE",
        "TCAB_DRIVER_MANAGED_BY",
        "TCAB_DISPATCHER_LOG_FORMAT",
        "RUST_LOG",
        METRICS_ADDR,
    },
}
# The metrics endpoint of each container by default: (port, port name).
DEFAULT_METRICS = {"admitter": (9090, "admit-metrics"), "lease-keeper": (9091, "lease-metrics"), "reaper": (9092, "reap-metrics")}

try:
    import helm_python as helm
    import yaml
    from kubernetes_validate import utils as kv
except ImportError as missing:  # pragma: no cover - environment problem
    print(f"FAIL imports: {missing}; install the pinned packages: pip install -r {HERE / 'requirements.txt'}")
    print("0 passed, 1 failed")
    sys.exit(1)


# --------------------------------------------------------------------------- values


def base_values() -> dict[str, Any]:
    """The required values, nothing else: what the "defaults" install sets (image.repository
    included: there is no default image)."""
    return {
        "image": {"repository": "registry.example/tcab-dispatcher"},
        "backend": {
            "url": "http://tcab-backend.tcab.svc:8080",
            "serviceToken": {"existingSecret": "tcab-backend-token"},
        },
        "driver": {"image": "registry.example/tcab-driver:3f2a9c1"},
    }


def merged(*overrides: dict[str, Any]) -> dict[str, Any]:
    """base_values() with each override deep-merged in order."""
    out = base_values()
    for override in overrides:
        _deep_merge(out, copy.deepcopy(override))
    return out


def _deep_merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for key, value in new.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _deep_merge(into[key], value)
        else:
            into[key] = value


def without(values: dict[str, Any], dotted: str) -> dict[str, Any]:
    """A copy of values with the key at a dotted path removed."""
    out = copy.deepcopy(values)
    *parents, last = dotted.split(".")
    node = out
    for part in parents:
        node = node[part]
    node.pop(last, None)
    return out


PUBLISHER_IMAGE = "registry.example/tcab-publisher:3f2a9c1"
MONITORING_NS = "monitoring"
RUNBOOK_URL = "https://git.example/tcab-dispatcher/blob/main/docs/operations.md"
# The operator's own variables of every container (a proxy, a CA bundle).
EXTRA_ENV = [
    {"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"},
    {"name": "NO_PROXY", "value": ".svc,.cluster.local,10.0.0.0/8"},
    {"name": "SSL_CERT_FILE", "value": "/etc/tcab/ca/ca.crt"},
]
TOKEN_VALUE = "not-a-real-service-token-7c1e"
DIGEST = "sha256:" + "0123456789abcdef" * 4

# The driver's and the publisher's securityContexts as every-value sets them
# (each differs from the binary's default), and the JSON each renders: Helm's
# toJson, keys sorted, no spaces.
JOB_SECURITY: dict[str, dict[str, Any]] = {
    "driver": {
        "podSecurityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
    },
    "publisher": {
        "podSecurityContext": {
            "runAsNonRoot": True,
            "fsGroup": 2000,
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/publisher.json"},
        },
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}},
    },
}
JOB_SECURITY_ENV = {
    "TCAB_DISPATCHER_DRIVER_POD_SECURITY_CONTEXT": '{"runAsNonRoot":true,"runAsUser":10001,"seccompProfile":{"type":"RuntimeDefault"}}',
    "TCAB_DISPATCHER_DRIVER_SECURITY_CONTEXT": '{"allowPrivilegeEscalation":false,"capabilities":{"drop":["ALL"]},"readOnlyRootFilesystem":true}',
    "TCAB_DISPATCHER_PUBLISHER_POD_SECURITY_CONTEXT": (
        '{"fsGroup":2000,"runAsNonRoot":true,"seccompProfile":{"localhostProfile":"profiles/publisher.json","type":"Localhost"}}'
    ),
    "TCAB_DISPATCHER_PUBLISHER_SECURITY_CONTEXT": '{"allowPrivilegeEscalation":false,"capabilities":{"add":["NET_BIND_SERVICE"],"drop":["ALL"]}}',
}

SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": base_values(),
    "publishing": merged({"publisher": {"image": PUBLISHER_IMAGE}}),
    "sandbox-elsewhere": merged({"sandbox": {"namespace": SANDBOX_NS}}),
    "sandbox-same-namespace": merged({"sandbox": {"namespace": NAMESPACE}}),
    "subscription-secrets-memory": merged(
        {
            "backend": {"serviceToken": {"existingSecret": "", "value": TOKEN_VALUE}},
            "driver": {
                "secrets": ["provider-api-keys", "git-credentials"],
                "subscription": {"secret": "claude-subscription", "dir": "/home/driver/.claude"},
                "fsGroup": 2000,
                "memoryLimit": "6Gi",
                "passthroughEnv": {
                    "TCAB_CONTAINER_IMAGE_PYTHON": "registry.example/run-python:3f2a9c1",
                    "TCAB_K8S_SANDBOX_NODE_SELECTOR": "pool=sandbox",
                },
            },
        }
    ),
    # The same token value as subscription-secrets-memory, then another: the checksum must follow it.
    "token-rotated": merged({"backend": {"serviceToken": {"existingSecret": "", "value": TOKEN_VALUE + "-rotated"}}}),
    "image-digest": merged({"image": {"repository": "registry.example/tcab-dispatcher", "tag": "9d8e7f6", "digest": DIGEST}}),
    "metrics-off": merged({"metrics": {"enabled": False}}),
    "existing-service-account": merged({"serviceAccount": {"create": False, "name": "tcab-ops"}}),
    "alerts": merged({"metrics": {"prometheusRule": {"enabled": True}}}),
    # A severity for every alert, as values.yaml suggests: it replaces the default, once.
    # Each alert on its own: one left out, one with its own severity, labels and pending period.
    "alerts-per-alert": merged(
        {
            "metrics": {
                "prometheusRule": {
                    "enabled": True,
                    "alertLabels": {"severity": "page", "team": "bench"},
                    "alerts": {
                        "TcabDispatcherJobStuck": {"enabled": False},
                        "TcabDispatcherLaneSaturated": {"severity": "info", "labels": {"team": "capacity", "tier": "2"}, "for": "10m"},
                        "TcabDispatcherGateClosed": {"for": "2m", "enabled": True},
                    },
                }
            }
        }
    ),
    "alerts-severity": merged({"metrics": {"prometheusRule": {"enabled": True, "alertLabels": {"severity": "page", "team": "bench"}}}}),
    # The opt-in NetworkPolicy with what it needs: the API server's and the backend's peers.
    "network-policy": merged(
        {
            "networkPolicy": {
                "enabled": True,
                "apiServer": {"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}, {"ipBlock": {"cidr": "172.18.0.2/32"}}]},
                "backend": {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tcab"}},
                            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "tcab-backend"}},
                        }
                    ]
                },
            }
        }
    ),
    "tests-off": merged({"tests": {"enabled": False}}),
    # {} turns a default off: it must render (as {}), unlike null.
    "job-security-off": merged(
        {
            "publisher": {"image": PUBLISHER_IMAGE, "podSecurityContext": {}, "securityContext": {}},
            "driver": {"podSecurityContext": {}, "securityContext": {}},
        }
    ),
    # Every value set, and everything on (metrics, PodMonitor, dashboard); image.digest is
    # left to image-digest, since it hides the tag this scenario checks.
    "every-value": merged(
        {
            "image": {"repository": "registry.example/tcab-dispatcher", "tag": "9d8e7f6", "pullPolicy": "Always"},
            "backend": {"timeoutSeconds": 15},
            "serviceAccount": {"create": True, "name": "tcab-dispatcher-sa", "annotations": {"iam.example/role": "tcab"}},
            "extraEnv": EXTRA_ENV,
            "extraVolumes": [{"name": "ca", "configMap": {"name": "corporate-ca"}}],
            "extraVolumeMounts": [{"name": "ca", "mountPath": "/etc/tcab/ca", "readOnly": True}],
            "containerSecurityContext": {"runAsUser": 10001, "seLinuxOptions": {"level": "s0:c123,c456"}},
            "dispatcher": {
                "managedBy": "tcab-dispatcher-blue",
                "pollIntervalSeconds": 2.5,
                "kubeTimeoutSeconds": 20,
                "watchTimeoutSeconds": 45,
                "startGraceSeconds": 240,
                "unschedulableGraceSeconds": 1200,
                "terminatingMarginSeconds": 90,
                "logFormat": "text",
                "rustLog": "tcab=debug,info",
                "vaultAddr": "127.0.0.1:50999",
                "maxInflight": 12,
                "maxPublishInflight": 2,
                "gateMaxAgeSeconds": 90,
                "jobTtlSeconds": 1800,
                "leaseSeconds": 180,
                "logTailLines": 80,
                "vaultAllowNonLoopback": False,
                "orphanSweep": False,
                "orphanGraceSeconds": 1200,
                "orphanSweepIntervalSeconds": 900,
            },
            "driver": {
                "terminationGraceSeconds": 150,
                "cpuRequest": "500m",
                "memoryRequest": "2Gi",
                "cpuLimit": 1.5,
                "memoryLimit": "8Gi",
                "activeDeadlineSeconds": 1000000,
                "artifactsUrl": "http://tcab-backend.tcab.svc:8080/artifacts",
                "reposUrl": "http://tcab-backend.tcab.svc:8080/repos",
                "finishDeadlineSeconds": 7200,
                "reportDeadlineSeconds": 900,
                "managedBy": "tcab-driver-blue",
                "secrets": ["provider-api-keys"],
                "subscription": {"secret": "sub", "dir": "/sub"},
                "fsGroup": 1000,
                "serviceAccount": "tcab-driver",
                **JOB_SECURITY["driver"],
            },
            "publisher": {
                "image": PUBLISHER_IMAGE,
                "activeDeadlineSeconds": 2400,
                "cpuRequest": "200m",
                "memoryRequest": "384Mi",
                "cpuLimit": 2,
                "memoryLimit": "2Gi",
                **JOB_SECURITY["publisher"],
            },
            "sandbox": {"namespace": SANDBOX_NS},
            "networkPolicy": {
                "enabled": True,
                "apiServer": {"to": [{"ipBlock": {"cidr": "10.0.0.0/24"}}], "ports": [6443]},
                "backend": {"to": [{"podSelector": {"matchLabels": {"app": "tcab-backend"}}}], "ports": [8081]},
                "dns": {
                    "to": [
                        {
                            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                        }
                    ]
                },
                "metricsFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING_NS}}}],
                "extraEgress": [{"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [{"port": 3128, "protocol": "TCP"}]}],
            },
            "tests": {"enabled": True},
            "metrics": {
                "enabled": True,
                "listenHost": "[::]",
                "admitterPort": 9190,
                "leaseKeeperPort": 9191,
                "reaperPort": 9192,
                "livenessProbe": {"initialDelaySeconds": 20, "periodSeconds": 15, "timeoutSeconds": 4, "failureThreshold": 8},
                "readinessProbe": {"periodSeconds": 7, "timeoutSeconds": 2, "failureThreshold": 2, "successThreshold": 1},
                "podMonitor": {
                    "enabled": True,
                    "labels": {"release": "prometheus"},
                    "interval": "30s",
                    "scrapeTimeout": "10s",
                    "namespace": MONITORING_NS,
                    "relabelings": [{"targetLabel": "cluster", "replacement": "blue"}],
                    "metricRelabelings": [{"sourceLabels": ["__name__"], "regex": "process_virtual_memory_bytes", "action": "drop"}],
                },
                "dashboard": {
                    "enabled": True,
                    "labels": {"grafana_dashboard": "1", "team": "benchmarks"},
                    "annotations": {"k8s-sidecar-target-directory": "/tmp/dashboards/tcab"},
                    "namespace": MONITORING_NS,
                },
                "prometheusRule": {
                    "enabled": True,
                    "namespace": MONITORING_NS,
                    "labels": {"release": "prometheus"},
                    "alertLabels": {"team": "benchmarks"},
                    "runbookUrl": RUNBOOK_URL,
                    "gateClosedFor": "10m",
                    "viewNotCurrentFor": "15m",
                    "saturatedSeconds": 3600,
                    "reportFailures": 5,
                    "restarts": 3,
                    "stuckMarginSeconds": 600,
                    "admissionErrors": 5,
                    "configurationDeaths": 2,
                    "sandboxMismatches": 3,
                },
            },
        }
    ),
}

# What "every-value" must render, per container: name -> exact string value.
EVERY_VALUE_ENV = {
    "common": {
        "TCAB_DISPATCHER_MANAGED_BY": "tcab-dispatcher-blue",
        "TCAB_DISPATCHER_POLL_INTERVAL_SECONDS": "2.5",
        "TCAB_DISPATCHER_LOG_FORMAT": "text",
        "RUST_LOG": "tcab=debug,info",
        "TCAB_DISPATCHER_KUBE_TIMEOUT_SECONDS": "20",
        "TCAB_DISPATCHER_WATCH_TIMEOUT_SECONDS": "45",
        **{e["name"]: e["value"] for e in EXTRA_ENV},
    },
    "backend": {
        "TCAB_DISPATCHER_VAULT_ADDR": "127.0.0.1:50999",
        "TCAB_BACKEND_URL": "http://tcab-backend.tcab.svc:8080",
        "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS": "15",
        "TCAB_PUBLISHER_IMAGE": PUBLISHER_IMAGE,
        "TCAB_DISPATCHER_LEASE_SECONDS": "180",
    },
    "admitter": {
        METRICS_ADDR: "[::]:9190",
        "TCAB_DRIVER_IMAGE": "registry.example/tcab-driver:3f2a9c1",
        "TCAB_DISPATCHER_MAX_INFLIGHT": "12",
        "TCAB_DISPATCHER_MAX_PUBLISH_INFLIGHT": "2",
        "TCAB_DISPATCHER_GATE_MAX_AGE_SECONDS": "90",
        "TCAB_DISPATCHER_JOB_TTL_SECONDS": "1800",
        "TCAB_DISPATCHER_DRIVER_TERMINATION_GRACE_SECONDS": "150",
        "TCAB_DISPATCHER_DRIVER_CPU_REQUEST": "500m",
        "TCAB_DISPATCHER_DRIVER_MEMORY_REQUEST": "2Gi",
        "TCAB_DISPATCHER_DRIVER_CPU_LIMIT": "1.5",
        "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT": "8Gi",
        "TCAB_DISPATCHER_DRIVER_ACTIVE_DEADLINE_SECONDS": "1000000",
        "TCAB_DISPATCHER_PUBLISHER_ACTIVE_DEADLINE_SECONDS": "2400",
        "TCAB_DISPATCHER_PUBLISHER_CPU_REQUEST": "200m",
        "TCAB_DISPATCHER_PUBLISHER_MEMORY_REQUEST": "384Mi",
        "TCAB_DISPATCHER_PUBLISHER_CPU_LIMIT": "2",
        "TCAB_DISPATCHER_PUBLISHER_MEMORY_LIMIT": "2Gi",
        "TCAB_DRIVER_ARTIFACTS_URL": "http://tcab-backend.tcab.svc:8080/artifacts",
        "TCAB_DRIVER_REPOS_URL": "http://tcab-backend.tcab.svc:8080/repos",
        "TCAB_DRIVER_FINISH_DEADLINE_SECONDS": "7200",
        "TCAB_DRIVER_REPORT_DEADLINE_SECONDS": "900",
        "TCAB_DRIVER_MANAGED_BY": "tcab-driver-blue",
        "TCAB_DRIVER_SECRETS": "provider-api-keys",
        "TCAB_DRIVER_SUBSCRIPTION_SECRET": "sub",
        "TCAB_DRIVER_SUBSCRIPTION_DIR": "/sub",
        "TCAB_DRIVER_FS_GROUP": "1000",
        "TCAB_DRIVER_SERVICE_ACCOUNT": "tcab-driver",
        "TCAB_K8S_NAMESPACE": SANDBOX_NS,
        **JOB_SECURITY_ENV,
    },
    "lease-keeper": {
        METRICS_ADDR: "[::]:9191",
        "TCAB_DISPATCHER_LOG_TAIL_LINES": "80",
        "TCAB_DISPATCHER_VAULT_ALLOW_NON_LOOPBACK": "false",
        "TCAB_DISPATCHER_START_GRACE_SECONDS": "240",
        "TCAB_DISPATCHER_UNSCHEDULABLE_GRACE_SECONDS": "1200",
        "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS": "90",
    },
    "reaper": {
        METRICS_ADDR: "[::]:9192",
        "TCAB_K8S_NAMESPACE": SANDBOX_NS,
        "TCAB_DRIVER_MANAGED_BY": "tcab-driver-blue",
        "TCAB_DISPATCHER_ORPHAN_SWEEP": "false",
        "TCAB_DISPATCHER_ORPHAN_GRACE_SECONDS": "1200",
        "TCAB_DISPATCHER_ORPHAN_SWEEP_INTERVAL_SECONDS": "900",
        "TCAB_DISPATCHER_TERMINATING_MARGIN_SECONDS": "90",
    },
}

# Values that must be refused: (name, values, substrings the error must contain).
# The first group is refused by values.schema.json, at `helm install` time.
SCHEMA_REFUSALS: list[tuple[str, dict[str, Any], list[str]]] = [
    ("missing backend.url", without(base_values(), "backend.url"), ["backend", "url"]),
    ("empty backend.url", merged({"backend": {"url": ""}}), ["/backend/url"]),
    ("missing driver.image", without(base_values(), "driver.image"), ["driver", "image"]),
    ("empty driver.image", merged({"driver": {"image": ""}}), ["/driver/image"]),
    (
        "passthrough key with a bad prefix",
        merged({"driver": {"passthroughEnv": {"OPENAI_API_KEY": "x"}}}),
        ["passthroughEnv", "OPENAI_API_KEY"],
    ),
    ("non-numeric maxInflight", merged({"dispatcher": {"maxInflight": "eight"}}), ["/dispatcher/maxInflight"]),
    ("negative maxInflight", merged({"dispatcher": {"maxInflight": -1}}), ["/dispatcher/maxInflight"]),
    ("unknown logFormat", merged({"dispatcher": {"logFormat": "xml"}}), ["/dispatcher/logFormat"]),
    ("vaultAddr not IP:port", merged({"dispatcher": {"vaultAddr": "vault"}}), ["/dispatcher/vaultAddr"]),
    ("negative leaseSeconds", merged({"dispatcher": {"leaseSeconds": -5}}), ["/dispatcher/leaseSeconds"]),
    ("backend.url without scheme", merged({"backend": {"url": "tcab-backend:8080"}}), ["/backend/url"]),
    ("misspelt top-level key", merged({"drivre": {"image": "x"}}), ["drivre"]),
    ("image.digest not sha256", merged({"image": {"digest": "sha256:abc"}}), ["/image/digest"]),
    ("metrics port out of range", merged({"metrics": {"reaperPort": 70000}}), ["/metrics/reaperPort"]),
    ("PodMonitor interval not a duration", merged({"metrics": {"podMonitor": {"interval": "30 seconds"}}}), ["/metrics/podMonitor/interval"]),
    ("metrics.listenHost a name", merged({"metrics": {"listenHost": "localhost"}}), ["/metrics/listenHost"]),
    ("liveness successThreshold", merged({"metrics": {"livenessProbe": {"successThreshold": 2}}}), ["successThreshold"]),
    ("a privileged container", merged({"containerSecurityContext": {"privileged": True}}), ["/containerSecurityContext/privileged"]),
    ("privilege escalation", merged({"containerSecurityContext": {"allowPrivilegeEscalation": True}}), ["/containerSecurityContext/allowPrivilegeEscalation"]),
    ("a writable root filesystem", merged({"containerSecurityContext": {"readOnlyRootFilesystem": False}}), ["/containerSecurityContext/readOnlyRootFilesystem"]),
    ("a container as root", merged({"containerSecurityContext": {"runAsUser": 0}}), ["/containerSecurityContext/runAsUser"]),
    ("an added capability", merged({"containerSecurityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}), ["/containerSecurityContext/capabilities"]),
    ("capabilities no longer all dropped", merged({"containerSecurityContext": {"capabilities": {"drop": ["NET_RAW"]}}}), ["/containerSecurityContext/capabilities/drop"]),
    ("a pod as root", merged({"podSecurityContext": {"runAsUser": 0}}), ["/podSecurityContext/runAsUser"]),
    (
        "the dispatcher pod with seccomp Unconfined",
        merged({"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        ["/podSecurityContext/seccompProfile/type", "RuntimeDefault"],
    ),
    ("the dispatcher pod's seccomp profile removed", merged({"podSecurityContext": {"seccompProfile": None}}), ["/podSecurityContext", "seccompProfile"]),
    ("the dispatcher pod's securityContext removed", merged({"podSecurityContext": None}), ["podSecurityContext"]),
    (
        "a dispatcher container with seccomp Unconfined",
        merged({"containerSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        ["/containerSecurityContext/seccompProfile/type"],
    ),
    ("a pod allowed to run as root", merged({"podSecurityContext": {"runAsNonRoot": False}}), ["/podSecurityContext/runAsNonRoot"]),
    (
        "a driver pod with seccomp Unconfined",
        merged({"driver": {"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}}),
        ["/driver/podSecurityContext/seccompProfile/type"],
    ),
    (
        "a publisher container with seccomp Unconfined",
        merged({"publisher": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}}),
        ["/publisher/securityContext/seccompProfile/type"],
    ),
    (
        "an fsGroup in the driver pod's securityContext (it is driver.fsGroup)",
        merged({"driver": {"podSecurityContext": {"fsGroup": 1000}}}),
        ["/driver/podSecurityContext/fsGroup"],
    ),
    (
        "a misspelt field of a Job's securityContext",
        merged({"driver": {"securityContext": {"allowPrivilegeEscalaton": False}}}),
        ["/driver/securityContext", "allowPrivilegeEscalaton"],
    ),
    (
        "a Job's runAsUser that is no number",
        merged({"publisher": {"podSecurityContext": {"runAsUser": "1000"}}}),
        ["/publisher/podSecurityContext/runAsUser"],
    ),
    (
        "a Job's securityContext that is no object",
        merged({"driver": {"podSecurityContext": "restricted"}}),
        ["/driver/podSecurityContext"],
    ),
    ("extraEnv naming a TCAB_ variable", merged({"extraEnv": [{"name": "TCAB_DISPATCHER_MAX_INFLIGHT", "value": "3"}]}), ["/extraEnv/0/name"]),
    ("extraEnv without a name", merged({"extraEnv": [{"value": "x"}]}), ["/extraEnv/0"]),
    ("an extra mount without a path", merged({"extraVolumeMounts": [{"name": "ca"}]}), ["/extraVolumeMounts/0"]),
    ("a negative kube timeout", merged({"dispatcher": {"kubeTimeoutSeconds": -1}}), ["/dispatcher/kubeTimeoutSeconds"]),
    ("a fractional watch timeout", merged({"dispatcher": {"watchTimeoutSeconds": 2.5}}), ["/dispatcher/watchTimeoutSeconds"]),
    ("a PodMonitor namespace that is no name", merged({"metrics": {"podMonitor": {"namespace": "Monitoring!"}}}), ["/metrics/podMonitor/namespace"]),
    ("a NetworkPolicy port out of range", merged({"networkPolicy": {"backend": {"ports": [70000]}}}), ["/networkPolicy/backend/ports/0"]),
    ("a NetworkPolicy peer that is no peer", merged({"networkPolicy": {"apiServer": {"to": [{"cidr": "10.0.0.1/32"}]}}}), ["/networkPolicy/apiServer/to/0", "cidr"]),
    ("an alert 'for' that is no duration", merged({"metrics": {"prometheusRule": {"gateClosedFor": "five minutes"}}}), ["/metrics/prometheusRule/gateClosedFor"]),
    (
        "settings of an alert the chart does not have",
        merged({"metrics": {"prometheusRule": {"alerts": {"TcabDispatcherGateClosd": {"enabled": False}}}}}),
        ["TcabDispatcherGateClosd"],
    ),
    (
        "an unknown setting of an alert",
        merged({"metrics": {"prometheusRule": {"alerts": {"TcabDispatcherJobStuck": {"disabled": True}}}}}),
        ["disabled"],
    ),
    (
        "an alert's 'for' that is no duration",
        merged({"metrics": {"prometheusRule": {"alerts": {"TcabDispatcherJobStuck": {"for": "10 minutes"}}}}}),
        ["/metrics/prometheusRule/alerts/TcabDispatcherJobStuck/for"],
    ),
    (
        "an alert's label that is no string",
        merged({"metrics": {"prometheusRule": {"alerts": {"TcabDispatcherJobStuck": {"labels": {"tier": 2}}}}}}),
        ["/metrics/prometheusRule/alerts/TcabDispatcherJobStuck/labels/tier"],
    ),
]
# The second group is refused by the templates themselves (checked with the
# schema removed, so the template layer is proven on its own), and the last
# three also through the full chart.
TEMPLATE_REFUSALS: list[tuple[str, dict[str, Any], list[str], bool]] = [
    (
        "image.repository left at its default (no image is published under a bare name)",
        without(base_values(), "image"),
        ["image.repository is required", "registry.example/tcab-dispatcher"],
        True,
    ),
    ("missing backend.url", without(base_values(), "backend.url"), ["backend.url is required"], False),
    ("missing driver.image", without(base_values(), "driver.image"), ["driver.image is required"], False),
    (
        "passthrough key with a bad prefix",
        merged({"driver": {"passthroughEnv": {"OPENAI_API_KEY": "x"}}}),
        ['"OPENAI_API_KEY" is not allowed', "TCAB_K8S_", "TCAB_CONTAINER_"],
        False,
    ),
    (
        "passthrough TCAB_K8S_NAMESPACE",
        merged({"driver": {"passthroughEnv": {"TCAB_K8S_NAMESPACE": "elsewhere"}}}),
        ["sandbox.namespace"],
        True,
    ),
    (
        "no service token",
        merged({"backend": {"serviceToken": {"existingSecret": ""}}}),
        ["backend.serviceToken is required"],
        True,
    ),
    (
        "both token sources",
        merged({"backend": {"serviceToken": {"value": TOKEN_VALUE}}}),
        ["either existingSecret or value, not both"],
        True,
    ),
    (
        "driver.managedBy equal to the dispatcher's default",
        merged({"driver": {"managedBy": "tcab-dispatcher"}}),
        ["must differ from dispatcher.managedBy"],
        True,
    ),
    (
        "driver.managedBy equal to dispatcher.managedBy",
        merged({"dispatcher": {"managedBy": "tcab-blue"}, "driver": {"managedBy": "tcab-blue"}}),
        ["must differ from dispatcher.managedBy", "tcab-blue"],
        True,
    ),
    (
        "two containers on one metrics port",
        merged({"metrics": {"leaseKeeperPort": 9090}}),
        ["admitter and lease-keeper ports are both 9090", "share the pod's network"],
        True,
    ),
    (
        "a metrics port on the vault's port",
        merged({"dispatcher": {"vaultAddr": "127.0.0.1:9092"}}),
        ["reaper port 9092 is the lease-keeper's vault port"],
        True,
    ),
    (
        "a PodMonitor with metrics off",
        merged({"metrics": {"enabled": False, "podMonitor": {"enabled": True}}}),
        ["metrics.podMonitor.enabled needs metrics.enabled"],
        True,
    ),
    (
        "image.digest not sha256",
        merged({"image": {"digest": "latest"}}),
        ["image.digest: expected sha256:<64 lowercase hex digits>"],
        False,
    ),
    (
        "extraEnv naming a TCAB_ variable",
        merged({"extraEnv": [{"name": "TCAB_DISPATCHER_MAX_INFLIGHT", "value": "3"}]}),
        ["extraEnv: TCAB_DISPATCHER_MAX_INFLIGHT is set by the chart"],
        False,
    ),
    (
        "extraEnv repeating RUST_LOG",
        merged({"extraEnv": [{"name": "RUST_LOG", "value": "debug"}]}),
        ["extraEnv: RUST_LOG is set by the chart"],
        False,
    ),
    (
        "a privileged container",
        merged({"containerSecurityContext": {"privileged": True}}),
        ["containerSecurityContext.privileged must stay false"],
        False,
    ),
    (
        "a writable root filesystem",
        merged({"containerSecurityContext": {"readOnlyRootFilesystem": False}}),
        ["containerSecurityContext.readOnlyRootFilesystem must stay true"],
        False,
    ),
    (
        "a container as root",
        merged({"containerSecurityContext": {"runAsUser": 0}}),
        ["containerSecurityContext.runAsUser must not be 0"],
        False,
    ),
    (
        "an added capability",
        merged({"containerSecurityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
        ["capabilities.add is refused"],
        False,
    ),
    (
        "a dispatcher container with seccomp Unconfined",
        merged({"containerSecurityContext": {"seccompProfile": {"type": "Unconfined"}}}),
        ["containerSecurityContext.seccompProfile.type Unconfined is refused"],
        False,
    ),
    (
        "no ServiceAccount created and none named",
        merged({"serviceAccount": {"create": False}}),
        ["serviceAccount.name is required when serviceAccount.create is false"],
        True,
    ),
    (
        "a NetworkPolicy without the API server's peers",
        merged({"networkPolicy": {"enabled": True, "backend": {"to": [{"podSelector": {"matchLabels": {"app": "b"}}}]}}}),
        ["networkPolicy.apiServer.to is required", "kubernetes"],
        True,
    ),
    (
        "a NetworkPolicy without the backend's peers",
        merged({"networkPolicy": {"enabled": True, "apiServer": {"to": [{"ipBlock": {"cidr": "10.96.0.1/32"}}]}}}),
        ["networkPolicy.backend.to is required"],
        True,
    ),
    (
        "alert rules with metrics off",
        merged({"metrics": {"enabled": False, "prometheusRule": {"enabled": True}}}),
        ["metrics.prometheusRule.enabled needs metrics.enabled"],
        True,
    ),
]


# --------------------------------------------------------------------------- runner


class Skip(Exception):
    """Raised by a check that cannot run here; printed as SKIP."""


@dataclass
class Runner:
    """Runs named checks, prints one line each, keeps the tally."""

    only: str | None = None
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)

    def check(self, name: str, fn: Callable[[], str | None]) -> None:
        if self.only and self.only not in name:
            return
        try:
            note = fn()
        except Skip as why:
            self.skipped += 1
            print(f"SKIP {name}: {why}")
        except AssertionError as why:
            self.failed += 1
            self.failures.append(name)
            print(f"FAIL {name}: {why}")
        except Exception as why:  # a crash in a check is a failure of that check
            self.failed += 1
            self.failures.append(name)
            detail = "".join(traceback.format_exception_only(type(why), why)).strip()
            print(f"FAIL {name}: unexpected {detail}")
        else:
            self.passed += 1
            print(f"PASS {name}" + (f" ({note})" if note else ""))
        sys.stdout.flush()


# --------------------------------------------------------------------------- rendering


@dataclass
class Rendered:
    """The manifests of one rendering, parsed."""

    docs: list[dict[str, Any]]
    namespace: str = NAMESPACE

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str, namespace: str | None = None) -> dict[str, Any]:
        namespace = namespace or self.namespace
        found = [d for d in self.of_kind(kind) if d["metadata"].get("namespace") == namespace]
        assert len(found) == 1, f"expected one {kind} in {namespace}, found {len(found)}"
        return found[0]

    def deployment(self) -> dict[str, Any]:
        return self.one("Deployment")

    def containers(self) -> dict[str, dict[str, Any]]:
        spec = self.deployment()["spec"]["template"]["spec"]
        return {c["name"]: c for c in spec["containers"]}

    def env(self, container: str) -> dict[str, dict[str, Any]]:
        entries = self.containers()[container].get("env") or []
        names = [e["name"] for e in entries]
        dupes = sorted({n for n in names if names.count(n) > 1})
        assert not dupes, f"{container}: duplicate env names {dupes}"
        return {e["name"]: e for e in entries}


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key: PyYAML keeps the last,
    but strict parsers (Flux, kustomize, the API server's for some fields) refuse the
    manifest."""


def _no_duplicate_keys(loader: StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicate_keys)


def render(chart: Any, values: dict[str, Any], name: str = RELEASE, namespace: str = NAMESPACE) -> Rendered:
    """Render with Helm's engine and parse every manifest (NOTES.txt left out), refusing a
    repeated key."""
    out = chart.render(values, name=name, namespace=namespace, is_install=True)
    docs: list[dict[str, Any]] = []
    for path in sorted(out):
        if not path.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.load_all(out[path], Loader=StrictLoader):
            if doc:
                docs.append(doc)
    return Rendered(docs, namespace)


def render_error(chart: Any, values: dict[str, Any]) -> str:
    """Render values that must be refused; return Helm's error message."""
    try:
        chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    except helm.HelmError as err:
        return str(err)
    raise AssertionError("rendered, but it must be refused")


def rules_of(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    """A Role's rules as (apiGroup, resource, verb) triples; refuses wider forms."""
    triples: set[tuple[str, str, str]] = set()
    for rule in role.get("rules") or []:
        extra = set(rule) - {"apiGroups", "resources", "verbs"}
        assert not extra, f"rule {rule} has {sorted(extra)}"
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in rule {rule}"
                    triples.add((group, resource, verb))
    return triples


def fmt_rules(rules: set[tuple[str, str, str]]) -> str:
    return ", ".join(f"{g or 'core'}/{r}:{v}" for g, r, v in sorted(rules))


# The PodMonitor is a custom resource: kubernetes-validate ships only the
# built-in Kubernetes schemas, so it gets a structural check against the fields
# prometheus-operator's monitoring.coreos.com/v1 API defines (README: "Checks").
POD_MONITOR = ("monitoring.coreos.com/v1", "PodMonitor")
PROMETHEUS_RULE = ("monitoring.coreos.com/v1", "PrometheusRule")
OPERATIONS_DOC = REPO / "docs" / "operations.md"
ALERTS_TEST = CHART / "tests" / "alerts.test.yaml"
# The alerts' runbooks, shipped inside the chart package: the Alerts section of
# docs/operations.md, its links to the rest of the repository's docs turned to plain text
# (they are not in the package). Rewritten by --update-runbook.
RUNBOOK = CHART / "RUNBOOK.md"
# The alerts the chart ships, each with a runbook in docs/operations.md.
ALERTS = [
    "TcabDispatcherGateClosed",
    "TcabDispatcherViewNotCurrent",
    "TcabDispatcherLaneSaturated",
    "TcabDispatcherReportsFailing",
    "TcabDispatcherContainerRestarting",
    "TcabDispatcherJobStuck",
    "TcabDispatcherDown",
    "TcabDispatcherAbsent",
    "TcabDispatcherAdmissionsFailing",
    "TcabDispatcherConfigurationDeaths",
    "TcabDispatcherSandboxMismatches",
]
PODMONITOR_SPEC_KEYS = {
    "selector",
    "namespaceSelector",
    "podMetricsEndpoints",
    "jobLabel",
    "podTargetLabels",
    "sampleLimit",
    "targetLimit",
    "labelLimit",
    "attachMetadata",
    "scrapeProtocols",
}
PODMONITOR_ENDPOINT_KEYS = {
    "port",
    "portNumber",
    "path",
    "scheme",
    "interval",
    "scrapeTimeout",
    "params",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
    "enableHttp2",
    "filterRunning",
    "followRedirects",
}


def documented_metrics() -> dict[str, str]:
    """Metric name -> type, from the table of docs/metrics.md."""
    rows = re.findall(r"^\| `(tcab_dispatcher_[a-z0-9_]+)` \| (counter|gauge|histogram) \|", METRICS_DOC.read_text(encoding="utf-8"), flags=re.M)
    assert rows, f"no metrics table in {METRICS_DOC.relative_to(REPO)}"
    names = [n for n, _ in rows]
    assert len(names) == len(set(names)), "a metric is listed twice"
    for name, kind in rows:
        assert (kind == "counter") == name.endswith("_total"), f"{name}: a {kind} ({'only' if kind == 'counter' else 'no'} counters end in _total)"
    return dict(rows)


def dashboard_exprs(board: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: panel targets and query variables."""
    exprs: list[str] = []

    def panels(items: list[dict[str, Any]]) -> None:
        for panel in items:
            exprs.extend(t["expr"] for t in panel.get("targets", []) if t.get("expr"))
            panels(panel.get("panels", []))

    panels(board.get("panels", []))
    for variable in board.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if variable.get("type") == "query" and query:
            exprs.append(query)
    return exprs


@dataclass
class Declared:
    """The binaries' variables, from charts/settings.json, by container."""

    variables: dict[str, dict[str, Any]]
    per_container: dict[str, set[str]]
    passthrough_prefixes: tuple[str, ...]
    passthrough_containers: set[str]

    def readers(self, name: str) -> list[str]:
        """The containers whose binary reads a variable, in container order."""
        return [c for c in CONTAINERS if name in self.per_container[c]]


def declared_settings() -> Declared:
    """Loads charts/settings.json and checks it names exactly the chart's binaries."""
    data = json.loads(SETTINGS_JSON.read_text(encoding="utf-8"))
    container_of = {binary: cname for cname, binary in CONTAINERS.items()}
    assert sorted(data["binaries"]) == sorted(container_of), f"{SETTINGS_JSON.name} names binaries {data['binaries']}"
    variables = {v["name"]: v for v in data["variables"]}
    assert len(variables) == len(data["variables"]), f"{SETTINGS_JSON.name} names a variable twice"
    per_container: dict[str, set[str]] = {c: set() for c in CONTAINERS}
    for v in data["variables"]:
        for binary in v["read_by"]:
            per_container[container_of[binary]].add(v["name"])
    passthrough = data["passthrough"]
    return Declared(
        variables,
        per_container,
        tuple(passthrough["prefixes"]),
        {container_of[b] for b in passthrough["read_by"]},
    )


def value_fits(value: str, declared: dict[str, Any]) -> str | None:
    """Why an env value does not fit a variable's declared type and minimum, or None."""
    kind = declared["type"]
    if kind == "boolean":
        ok = value.lower() in {"true", "false", "1", "0", "yes", "no", "on", "off"}
        return None if ok else "not a boolean"
    if kind not in ("integer", "number"):
        return None
    if kind == "integer" and not re.fullmatch(r"-?[0-9]+", value):
        return "not a whole number (the binary reads digits only)"
    try:
        number = float(value)
    except ValueError:
        return "not a number"
    if number != number or number in (float("inf"), float("-inf")):
        return "not a finite number"
    minimum = declared.get("minimum")
    if minimum:
        low, exclusive = minimum["value"], minimum["exclusive"]
        if number < low or (exclusive and number == low):
            return f"below the minimum ({'>' if exclusive else '>='} {low})"
    return None


# Variables whose value differs by container on purpose.
PER_CONTAINER = {METRICS_ADDR}  # each container listens on its own port

# Where the chart leaves a reader of a variable without it on purpose:
# (container, variable) -> when (a predicate on the scenario's values) and why.
LEFT_OUT: dict[tuple[str, str], tuple[Callable[[dict[str, Any]], bool], str]] = {
    **{
        ("reaper", name): (
            lambda values: str((values.get("dispatcher") or {}).get("orphanSweep")).lower() == "false",
            "the reaper calls the backend only for the orphan sweep, which is off",
        )
        for name in ("TCAB_BACKEND_URL", "TCAB_BACKEND_SERVICE_TOKEN", "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS")
    },
    ("admitter", "TCAB_K8S_NAMESPACE"): (
        lambda values: not (values.get("sandbox") or {}).get("namespace"),
        "unset, the drivers' sandbox namespace is their own, the release namespace the reaper is given",
    ),
}


def value_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths of the values a user sets: leaves, empty maps, and VALUE_GROUPS."""
    paths: set[str] = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in VALUE_GROUPS:
            paths |= value_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def uncommented_keys(text: str) -> list[str]:
    """Dotted paths of values.yaml keys not directly preceded by a comment line."""
    missing: list[str] = []
    stack: list[tuple[int, str]] = []
    previous = ""
    key_line = re.compile(r"^(\s*)([A-Za-z][A-Za-z0-9_]*):")
    for line in text.splitlines():
        match = key_line.match(line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([p for _, p in stack] + [match.group(2)])
            inside_group = any(path.startswith(g + ".") for g in VALUE_GROUPS)
            if not inside_group and not previous.lstrip().startswith("#"):
                missing.append(path)
            stack.append((indent, match.group(2)))
        if line.strip():
            previous = line
    return missing


# --------------------------------------------------------------------------- checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--update-golden", action="store_true", help=f"rewrite {GOLDEN.relative_to(REPO)}")
    parser.add_argument("--update-runbook", action="store_true", help=f"rewrite {RUNBOOK.relative_to(REPO)} from docs/operations.md")
    parser.add_argument("-k", dest="only", help="run only the checks whose name contains this")
    args = parser.parse_args()

    # The Go engine logs template `fail`s it meets while linting; keep that off stdout/stderr.
    logging.getLogger("helm_python.native").addHandler(logging.NullHandler())
    logging.getLogger("helm_python.native").propagate = False
    helm.enable_logging(logging.CRITICAL)

    kube_version = kv.latest_version()
    run = Runner(only=args.only)
    print(
        f"chart {CHART.relative_to(REPO)}; Helm SDK {helm.helm_sdk_version()} via helm-python-sdk "
        f"{helm.__version__}; kubernetes-validate {kv.__version__} against Kubernetes {kube_version} (strict)"
    )

    chart = helm.Chart.load(CHART)
    rendered: dict[str, Rendered] = {}

    # --- render and lint each scenario
    for name, values in SCENARIOS.items():

        def do_render(name: str = name, values: dict[str, Any] = values) -> str:
            rendered[name] = render(chart, values)
            kinds = sorted(d["kind"] for d in rendered[name].docs)
            return ", ".join(kinds)

        run.check(f"render [{name}]", do_render)

        def do_lint(values: dict[str, Any] = values) -> None:
            report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{kube_version}")
            problems = [m for m in report["messages"] if m["severity"] >= 2] + [{"error": e} for e in report["errors"]]
            assert not problems, "; ".join(str(p.get("error")) for p in problems)

        run.check(f"lint --strict [{name}]", do_lint)

    def need(name: str) -> Rendered:
        """A scenario's rendering; rendered here when its own check was filtered out."""
        if name not in rendered:
            try:
                rendered[name] = render(chart, SCENARIOS[name])
            except helm.HelmError as err:
                raise AssertionError(f"scenario {name} does not render: {first_line(str(err))}") from err
        return rendered[name]

    # --- every manifest is valid Kubernetes, strictly
    for name in SCENARIOS:

        def do_validate(name: str = name) -> str:
            docs = need(name).docs
            errors = []
            left_out = 0
            for doc in docs:
                label = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
                if (doc.get("apiVersion"), doc.get("kind")) in (POD_MONITOR, PROMETHEUS_RULE):
                    left_out += 1  # no schema in kubernetes-validate: checked structurally below
                    continue
                try:
                    kv.validate(doc, kube_version, strict=True)
                except kv.ValidationError as err:
                    where = ".".join(str(p) for p in err.path)
                    errors.append(f"{label}: {where}: {err.message}")
                except kv.SchemaNotFoundError as err:
                    errors.append(f"{label}: {err.message}")
            assert not errors, "; ".join(errors)
            return f"{len(docs) - left_out} manifests" + (f" (+{left_out} custom resources, checked structurally)" if left_out else "")

        run.check(f"kubernetes-validate --strict {kube_version} [{name}]", do_validate)

    # --- structure of the default install
    def deployment_shape() -> None:
        r = need("defaults")
        assert len(r.of_kind("Deployment")) == 1, "expected exactly one Deployment"
        spec = r.deployment()["spec"]
        assert spec.get("replicas") == 1, f"replicas = {spec.get('replicas')}"
        assert spec.get("strategy") == {"type": "Recreate"}, f"strategy = {spec.get('strategy')}"
        pod = spec["template"]["spec"]
        grace = pod.get("terminationGracePeriodSeconds")
        assert isinstance(grace, int) and 10 <= grace <= 60, f"terminationGracePeriodSeconds = {grace}"
        selector = spec["selector"]["matchLabels"]
        labels = spec["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), "pod labels do not match the selector"
        assert "app.kubernetes.io/managed-by" not in labels, (
            "the dispatcher pod must not carry app.kubernetes.io/managed-by (the dispatcher selects its Jobs by it)"
        )

    run.check("Deployment: one replica, strategy Recreate, grace ~30 s", deployment_shape)

    def containers_and_commands() -> None:
        r = need("defaults")
        containers = r.containers()
        assert list(containers) == list(CONTAINERS), f"containers = {list(containers)}"
        for cname, binary in CONTAINERS.items():
            c = containers[cname]
            assert c.get("command") == [binary], f"{cname}: command = {c.get('command')}"
            assert not c.get("args"), f"{cname}: args {c.get('args')} (the binaries take no flags)"
        images = {c["image"] for c in containers.values()}
        assert images == {"registry.example/tcab-dispatcher:0.1.0"}, f"images = {images}"
        pod = r.deployment()["spec"]["template"]["spec"]
        assert not pod.get("initContainers"), "unexpected init containers"

    run.check("Deployment: three containers admitter/lease-keeper/reaper with their commands", containers_and_commands)

    def image_values() -> None:
        containers = need("every-value").containers()
        for cname, c in containers.items():
            assert c["image"] == "registry.example/tcab-dispatcher:9d8e7f6", f"{cname}: image = {c['image']}"
            assert c["imagePullPolicy"] == "Always", f"{cname}: imagePullPolicy = {c['imagePullPolicy']}"

    run.check("Deployment: one image from image.repository/tag/pullPolicy", image_values)

    def hardened() -> None:
        r = need("defaults")
        pod = r.deployment()["spec"]["template"]["spec"]
        assert pod.get("securityContext", {}).get("runAsNonRoot") is True, "pod runAsNonRoot"
        for cname, c in r.containers().items():
            sc = c.get("securityContext") or {}
            assert sc.get("readOnlyRootFilesystem") is True, f"{cname}: readOnlyRootFilesystem"
            assert sc.get("runAsNonRoot") is True, f"{cname}: runAsNonRoot"
            assert sc.get("allowPrivilegeEscalation") is False, f"{cname}: allowPrivilegeEscalation"
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{cname}: capabilities.drop"
            assert not sc.get("capabilities", {}).get("add"), f"{cname}: capabilities.add"
            res = c.get("resources") or {}
            req = res.get("requests") or {}
            assert req.get("cpu") and req.get("memory"), f"{cname}: requests {req}"
            assert (res.get("limits") or {}).get("memory"), f"{cname}: no memory limit"
            assert c.get("terminationMessagePolicy") == "FallbackToLogsOnError", (
                f"{cname}: terminationMessagePolicy {c.get('terminationMessagePolicy')} (kubectl describe must show the exit-2 line)"
            )

    run.check("containers: hardened securityContext, own resources, FallbackToLogsOnError", hardened)

    def memory_limits() -> str:
        peaks: dict[str, float] = {}
        for line in FIGURES.read_text(encoding="utf-8").splitlines():
            cells = line.split("\t")
            if len(cells) >= 5 and cells[1] == "footprint-driven":
                m = re.fullmatch(rf"(tcab-[a-z-]+) peak at {MEMORY_SCALE_JOBS} jobs", cells[2])
                if m and cells[4] == "MiB":
                    peaks[m.group(1)] = float(cells[3])  # the last recorded wins
        assert set(peaks) == set(CONTAINERS.values()), f"no recorded peak at {MEMORY_SCALE_JOBS} Jobs for {sorted(set(CONTAINERS.values()) - set(peaks))}"
        units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
        got = []
        for cname, c in need("defaults").containers().items():
            limit = str(c["resources"]["limits"]["memory"])
            m = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi)", limit)
            assert m, f"{cname}: memory limit {limit!r}"
            mib = float(m.group(1)) * units[m.group(2)]
            peak = peaks[CONTAINERS[cname]]
            assert mib >= peak * MEMORY_HEADROOM, (
                f"{cname}: limit {limit} is {mib / peak:.2f}x its measured peak {peak:.1f} MiB at {MEMORY_SCALE_JOBS} Jobs; want at least {MEMORY_HEADROOM}x"
            )
            got.append(f"{cname} {limit} = {mib / peak:.1f}x {peak:.1f} MiB")
        return "; ".join(got)

    run.check("resources: each container's memory limit holds its measured peak at 100,000 Jobs with headroom (docs/performance)", memory_limits)

    def metrics_endpoints() -> str:
        r = need("defaults")
        for cname, (port, port_name) in DEFAULT_METRICS.items():
            c = r.containers()[cname]
            assert c.get("ports") == [{"name": port_name, "containerPort": port, "protocol": "TCP"}], (
                f"{cname}: ports {c.get('ports')}"
            )
            assert r.env(cname)[METRICS_ADDR] == {"name": METRICS_ADDR, "value": f"0.0.0.0:{port}"}, (
                f"{cname}: {r.env(cname).get(METRICS_ADDR)}"
            )
            live, ready = c.get("livenessProbe") or {}, c.get("readinessProbe") or {}
            assert live.get("httpGet") == {"path": "/healthz", "port": port_name}, f"{cname}: liveness {live}"
            assert ready.get("httpGet") == {"path": "/readyz", "port": port_name}, f"{cname}: readiness {ready}"
            assert "startupProbe" not in c, f"{cname}: startupProbe"
            # A liveness failure restarts the container: at least a minute of failures first.
            patience = live.get("periodSeconds", 10) * live.get("failureThreshold", 3)
            assert patience >= 60 and live.get("timeoutSeconds", 1) >= 3, f"{cname}: liveness too eager: {live}"
        names = [p["name"] for c in r.containers().values() for p in c.get("ports", [])]
        ports = [p["containerPort"] for c in r.containers().values() for p in c.get("ports", [])]
        assert len(set(names)) == len(names) == 3 and len(set(ports)) == 3, f"ports {ports} named {names}"
        for port_name in names:
            assert re.fullmatch(r"(?=.*[a-z])[a-z0-9]([a-z0-9]|-(?!-))*[a-z0-9]", port_name) and len(port_name) <= 15, (
                f"port name {port_name!r} is not an IANA service name of at most 15 characters"
            )
        return ", ".join(f"{n}:{p}" for n, p in zip(names, ports))

    run.check("metrics on by default: each container its own port, METRICS_ADDR, /healthz and /readyz probes", metrics_endpoints)

    def metrics_every_value() -> None:
        r = need("every-value")
        want = {"admitter": 9190, "lease-keeper": 9191, "reaper": 9192}
        for cname, port in want.items():
            c = r.containers()[cname]
            assert [p["containerPort"] for p in c["ports"]] == [port], f"{cname}: {c['ports']}"
            live, ready = c["livenessProbe"], c["readinessProbe"]
            assert (live["initialDelaySeconds"], live["periodSeconds"], live["timeoutSeconds"], live["failureThreshold"]) == (20, 15, 4, 8), live
            assert (ready["periodSeconds"], ready["timeoutSeconds"], ready["failureThreshold"]) == (7, 2, 2), ready

    run.check("metrics: ports, listen host and probe timings follow the values", metrics_every_value)

    def metrics_off() -> None:
        r = need("metrics-off")
        for cname, c in r.containers().items():
            for key in ("ports", "livenessProbe", "readinessProbe", "startupProbe"):
                assert key not in c, f"{cname}: {key} with metrics off"
            assert METRICS_ADDR not in r.env(cname), f"{cname}: {METRICS_ADDR} with metrics off"
            assert c.get("terminationMessagePolicy") == "FallbackToLogsOnError", cname
        assert not r.of_kind("PodMonitor") and not r.of_kind("ConfigMap"), "metrics objects with metrics off"

    run.check("metrics off: no ports, probes or METRICS_ADDR in any container", metrics_off)

    def pod_annotations() -> None:
        for name in SCENARIOS:
            meta = need(name).deployment()["spec"]["template"]["metadata"]
            annotations = meta.get("annotations") or {}
            assert annotations.get("kubectl.kubernetes.io/default-container") == "admitter", f"[{name}] {annotations}"
        a = need("subscription-secrets-memory").deployment()["spec"]["template"]["metadata"]["annotations"]
        b = need("token-rotated").deployment()["spec"]["template"]["metadata"]["annotations"]
        again = render(chart, SCENARIOS["subscription-secrets-memory"]).deployment()["spec"]["template"]["metadata"]
        assert re.fullmatch(r"[0-9a-f]{64}", a.get("checksum/backend-token", "")), f"checksum {a}"
        assert a["checksum/backend-token"] != b["checksum/backend-token"], "a new token value does not roll the pod"
        assert again["annotations"]["checksum/backend-token"] == a["checksum/backend-token"], "checksum not stable"
        assert TOKEN_VALUE not in yaml.safe_dump(a), "the token in an annotation"
        existing = need("defaults").deployment()["spec"]["template"]["metadata"]["annotations"]
        assert not any(k.startswith("checksum/") for k in existing), f"a checksum with existingSecret: {existing}"
        custom = render(chart, merged({"podAnnotations": {"example.com/team": "bench"}}))
        got = custom.deployment()["spec"]["template"]["metadata"]["annotations"]
        assert got == {"kubectl.kubernetes.io/default-container": "admitter", "example.com/team": "bench"}, got

    run.check("pod annotations: default-container; checksum/backend-token follows a chart-created token", pod_annotations)

    def image_digest() -> None:
        containers = need("image-digest").containers()
        want = f"registry.example/tcab-dispatcher@{DIGEST}"
        for cname, c in containers.items():
            assert c["image"] == want, f"{cname}: image = {c['image']}"

    run.check("image.digest: the containers run repository@sha256:..., not the tag", image_digest)

    def podmonitor_structure() -> str:
        r = need("every-value")
        monitors = r.of_kind("PodMonitor")
        assert len(monitors) == 1, f"{len(monitors)} PodMonitors"
        pm = monitors[0]
        assert (pm["apiVersion"], pm["kind"]) == POD_MONITOR, (pm["apiVersion"], pm["kind"])
        assert set(pm) == {"apiVersion", "kind", "metadata", "spec"}, sorted(pm)
        meta = pm["metadata"]
        assert set(meta) <= {"name", "namespace", "labels", "annotations"}, sorted(meta)
        assert meta["namespace"] == MONITORING_NS and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", meta["name"]), meta
        assert meta["labels"].get("release") == "prometheus", meta["labels"]
        for key, value in meta["labels"].items():
            assert isinstance(value, str) and len(value) <= 63, f"label {key}={value!r}"
        spec = pm["spec"]
        assert set(spec) <= PODMONITOR_SPEC_KEYS, f"spec keys {sorted(set(spec) - PODMONITOR_SPEC_KEYS)} are not PodMonitor fields"
        assert set(spec["selector"]) == {"matchLabels"}, spec["selector"]
        # In another namespace, it selects the pod in the release namespace.
        assert spec.get("namespaceSelector") == {"matchNames": [NAMESPACE]}, spec.get("namespaceSelector")
        pod = r.deployment()["spec"]["template"]
        assert spec["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items(), "selects no dispatcher pod"
        port_names = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        endpoints = spec["podMetricsEndpoints"]
        assert isinstance(endpoints, list) and {e.get("port") for e in endpoints} == port_names, (
            f"endpoints {[e.get('port') for e in endpoints]} != container ports {sorted(port_names)}"
        )
        duration = re.compile(r"(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?")
        for e in endpoints:
            assert set(e) <= PODMONITOR_ENDPOINT_KEYS, f"endpoint keys {sorted(set(e) - PODMONITOR_ENDPOINT_KEYS)}"
            assert e["path"] == "/metrics" and e["scheme"] == "http", e
            assert e["interval"] == "30s" and e["scrapeTimeout"] == "10s", e
            assert e["relabelings"] == [{"targetLabel": "cluster", "replacement": "blue"}], e
            assert e["metricRelabelings"][0]["action"] == "drop", e
            for key in ("interval", "scrapeTimeout"):
                assert duration.fullmatch(e[key]) and e[key], f"{key} {e[key]!r} is not a Prometheus duration"
        assert not need("defaults").of_kind("PodMonitor"), "a PodMonitor by default"
        bare = render(chart, merged({"metrics": {"podMonitor": {"enabled": True}}})).of_kind("PodMonitor")[0]
        assert all(set(e) == {"port", "path", "scheme"} for e in bare["spec"]["podMetricsEndpoints"]), bare
        assert bare["metadata"]["namespace"] == NAMESPACE and "namespaceSelector" not in bare["spec"], bare
        return f"{len(endpoints)} endpoints: " + ", ".join(sorted(port_names))

    run.check("PodMonitor (monitoring.coreos.com/v1, structural): scrapes the three ports; off by default", podmonitor_structure)

    def service_account() -> None:
        every = need("every-value")
        sa = every.one("ServiceAccount")
        assert sa["metadata"]["name"] == "tcab-dispatcher-sa", sa["metadata"]
        assert sa["metadata"]["annotations"] == {"iam.example/role": "tcab"}, sa["metadata"]
        assert every.deployment()["spec"]["template"]["spec"]["serviceAccountName"] == "tcab-dispatcher-sa"
        existing = need("existing-service-account")
        assert not existing.of_kind("ServiceAccount"), "a ServiceAccount created with serviceAccount.create false"
        rb = existing.one("RoleBinding")
        assert rb["subjects"] == [{"kind": "ServiceAccount", "name": "tcab-ops", "namespace": NAMESPACE}], rb["subjects"]
        assert existing.deployment()["spec"]["template"]["spec"]["serviceAccountName"] == "tcab-ops"

    run.check("serviceAccount: create or not, a name of its own, annotations; the Role bound to it either way", service_account)

    def extras() -> None:
        r = need("every-value")
        pod = r.deployment()["spec"]["template"]["spec"]
        assert pod.get("volumes") == [{"name": "ca", "configMap": {"name": "corporate-ca"}}], pod.get("volumes")
        for cname, c in r.containers().items():
            assert c.get("volumeMounts") == [{"name": "ca", "mountPath": "/etc/tcab/ca", "readOnly": True}], cname
            env = r.env(cname)
            for e in EXTRA_ENV:
                assert env.get(e["name"]) == e, f"{cname}: {e['name']} = {env.get(e['name'])}"
        plain = need("defaults").deployment()["spec"]["template"]["spec"]
        assert "volumes" not in plain and all("volumeMounts" not in c for c in plain["containers"]), "extras by default"

    run.check("extraEnv, extraVolumes, extraVolumeMounts reach the pod and every container", extras)

    def security_override() -> None:
        r = need("every-value")
        for cname, c in r.containers().items():
            sc = c["securityContext"]
            assert sc.get("runAsUser") == 10001 and sc.get("seLinuxOptions") == {"level": "s0:c123,c456"}, f"{cname}: {sc}"
            assert (sc["readOnlyRootFilesystem"], sc["runAsNonRoot"], sc["allowPrivilegeEscalation"], sc["privileged"]) == (
                True,
                True,
                False,
                False,
            ), f"{cname}: {sc}"
            assert sc["capabilities"] == {"drop": ["ALL"]}, f"{cname}: {sc}"

    run.check("containerSecurityContext: merged over the hardened one, which stays", security_override)

    def every_setting_exposed() -> str:
        declared = declared_settings()
        r = need("every-value")
        values = SCENARIOS["every-value"]
        missing = []
        for var in declared.variables:
            for cname in declared.readers(var):
                if var in r.env(cname):
                    continue
                left_out = LEFT_OUT.get((cname, var))
                if left_out and left_out[0](values):
                    continue
                missing.append(f"{var} ({cname})")
        assert not missing, f"no chart value renders {missing}"
        return f"{len(declared.variables)} variables"

    run.check("values: every variable the binaries declare has a chart value (every-value renders it for each reader)", every_setting_exposed)

    def prometheus_rule() -> str:
        r = need("every-value")
        rules = r.of_kind("PrometheusRule")
        assert len(rules) == 1, f"{len(rules)} PrometheusRules"
        pr = rules[0]
        assert (pr["apiVersion"], pr["kind"]) == PROMETHEUS_RULE, (pr["apiVersion"], pr["kind"])
        assert set(pr) == {"apiVersion", "kind", "metadata", "spec"}, sorted(pr)
        assert pr["metadata"]["namespace"] == MONITORING_NS, pr["metadata"]
        assert pr["metadata"]["labels"].get("release") == "prometheus", pr["metadata"]["labels"]
        assert set(pr["spec"]) == {"groups"}, sorted(pr["spec"])
        (group,) = pr["spec"]["groups"]
        assert set(group) == {"name", "rules"}, sorted(group)
        names = [rule.get("alert") for rule in group["rules"]]
        assert names == ALERTS, names
        anchors = markdown_anchors(OPERATIONS_DOC.read_text(encoding="utf-8"))
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, sorted(rule)
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["labels"]
            assert rule["labels"]["team"] == "benchmarks", rule["labels"]
            assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, sorted(rule["annotations"])
            url, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            assert url == RUNBOOK_URL, rule["annotations"]["runbook_url"]
            assert anchor == rule["alert"].lower() and anchor in anchors, f"{rule['alert']}: no runbook #{anchor} in docs/operations.md"
            assert 'namespace="tcab"' in rule["expr"], rule["expr"]
        by = {rule["alert"]: rule for rule in group["rules"]}
        assert by["TcabDispatcherGateClosed"]["for"] == "10m" and by["TcabDispatcherViewNotCurrent"]["for"] == "15m"
        assert "> 3600" in by["TcabDispatcherLaneSaturated"]["expr"], by["TcabDispatcherLaneSaturated"]["expr"]
        assert not need("defaults").of_kind("PrometheusRule"), "alert rules by default"
        default_urls = [rule["annotations"].get("runbook_url") for rule in need("alerts").of_kind("PrometheusRule")[0]["spec"]["groups"][0]["rules"]]
        assert default_urls == [None] * len(ALERTS), f"runbook_url without runbookUrl: {default_urls}"
        return f"{len(names)} alerts, each with a runbook"

    run.check("PrometheusRule (monitoring.coreos.com/v1, structural): the alerts, their runbooks, labels; off by default", prometheus_rule)

    def alerts_select_the_release() -> str:
        """kube-state-metrics' series carry no pod labels: the rules match this Deployment's pod
        names by shape. It must match every pod name Kubernetes generates for this release (a
        generated name is cut to 58 characters before its 5 random ones) and none of a release
        whose name extends this one's; the dispatcher's own series are selected by the
        app.kubernetes.io/instance label the PodMonitor copies onto them."""
        checked = 0
        for release in (RELEASE, "tcab", "r" * 44, "s" * 53):
            values = merged({"metrics": {"prometheusRule": {"enabled": True}, "podMonitor": {"enabled": True}}})
            r = render(chart, values, name=release)
            fullname = r.deployment()["metadata"]["name"]
            (pm,) = r.of_kind("PodMonitor")
            assert pm["spec"].get("podTargetLabels") == ["app.kubernetes.io/instance"], pm["spec"].get("podTargetLabels")
            rules = {rule["alert"]: rule for rule in r.of_kind("PrometheusRule")[0]["spec"]["groups"][0]["rules"]}
            expr = rules["TcabDispatcherContainerRestarting"]["expr"]
            shape = re.search(r'kube_pod_container_status_restarts_total\{[^}]*pod=~"((?:[^"\\]|\\.)*)"', expr)
            assert shape, expr
            pattern = json.loads(f'"{shape.group(1)}"')  # PromQL strings unescape as JSON's do here
            for rule in rules.values():
                selectors = re.findall(r'\b([a-z_:][a-z0-9_:]*)\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}', rule["expr"])
                for metric, matchers in selectors:
                    if metric.startswith("kube_"):
                        continue
                    assert f'app_kubernetes_io_instance="{release}"' in matchers, f"{rule['alert']}: {matchers}"
            for hash_len in (8, 9, 10):
                pod = (f"{fullname}-{'7d9c8b6f5b'[:hash_len]}-")[:58] + "x2x4q"
                assert re.fullmatch(pattern, pod), f"{pattern!r} does not match this release's pod {pod!r}"
                other = (f"{fullname}-x-{'7d9c8b6f5b'[:hash_len]}-")[:58] + "q7w2z"
                if len(f"{fullname}-x-") + hash_len < 58:
                    assert not re.fullmatch(pattern, other), f"{pattern!r} matches another release's pod {other!r}"
                checked += 1
        return f"{checked} pod names"

    run.check("alerts: select this release only (instance label; kube-state-metrics by the pod name's exact shape)", alerts_select_the_release)

    def alert_labels_merge() -> str:
        (pr,) = need("alerts-severity").of_kind("PrometheusRule")
        rules = pr["spec"]["groups"][0]["rules"]
        for rule in rules:
            assert rule["labels"] == {"severity": "page", "team": "bench"}, f"{rule['alert']}: {rule['labels']}"
        return f"{len(rules)} alerts, each one severity key"

    run.check("alerts: alertLabels.severity replaces the default severity (no duplicate key; parsed strictly)", alert_labels_merge)

    def alerts_per_alert() -> str:
        (pr,) = need("alerts-per-alert").of_kind("PrometheusRule")
        by = {rule["alert"]: rule for rule in pr["spec"]["groups"][0]["rules"]}
        assert "TcabDispatcherJobStuck" not in by, "a disabled alert is rendered"
        assert set(by) == set(ALERTS) - {"TcabDispatcherJobStuck"}, sorted(by)
        saturated = by["TcabDispatcherLaneSaturated"]
        assert saturated["labels"] == {"severity": "info", "team": "capacity", "tier": "2"}, saturated["labels"]
        assert saturated.get("for") == "10m", saturated
        assert by["TcabDispatcherGateClosed"]["for"] == "2m", by["TcabDispatcherGateClosed"]
        assert by["TcabDispatcherViewNotCurrent"]["for"] == "5m", by["TcabDispatcherViewNotCurrent"]
        for name, rule in by.items():
            if name != "TcabDispatcherLaneSaturated":
                assert rule["labels"] == {"severity": "page", "team": "bench"}, f"{name}: {rule['labels']}"
        # Left at their defaults, every alert is there with its own severity.
        (default,) = need("alerts").of_kind("PrometheusRule")
        severities = {rule["alert"]: rule["labels"]["severity"] for rule in default["spec"]["groups"][0]["rules"]}
        assert list(severities) == ALERTS, list(severities)
        assert severities["TcabDispatcherGateClosed"] == "critical" and severities["TcabDispatcherJobStuck"] == "warning", severities
        return f"{len(by)} of {len(ALERTS)} alerts"

    run.check("alerts: each can be left out, and given its own severity, labels and 'for' (metrics.prometheusRule.alerts)", alerts_per_alert)

    def runbook_travels() -> str:
        want = runbook_text()
        if args.update_runbook:
            RUNBOOK.write_text(want, encoding="utf-8")
        assert RUNBOOK.exists(), f"{RUNBOOK.relative_to(REPO)} is missing: the packaged chart carries no runbook; run with --update-runbook"
        assert RUNBOOK.read_text(encoding="utf-8") == want, (
            f"{RUNBOOK.relative_to(REPO)} differs from docs/operations.md#alerts; run with --update-runbook"
        )
        anchors = markdown_anchors(want)
        for alert in ALERTS:
            assert alert.lower() in anchors, f"{RUNBOOK.name} has no section for {alert}"
        linked = re.findall(r"\]\(([^)]+)\)", want)
        outside = [t for t in linked if not t.startswith(("http://", "https://", "#"))]
        assert not outside, f"{RUNBOOK.name} links outside the chart package: {outside}"
        for target in (t for t in linked if t.startswith("#")):
            assert target[1:] in anchors, f"{RUNBOOK.name}: no heading for link {target}"
        # runbook_url is a link or nothing: unset, the rules carry none (a repository path
        # is no link an alert receiver can open); set, <runbookUrl>#<alert>.
        (pr,) = need("alerts").of_kind("PrometheusRule")
        for rule in pr["spec"]["groups"][0]["rules"]:
            url = rule["annotations"].get("runbook_url")
            assert url is None or re.match(r"https?://", url), f"{rule['alert']}: runbook_url {url!r} is not a link"
        chart_readme = README.read_text(encoding="utf-8")
        outside_links = re.findall(r"\]\((\.\./[^)]*)\)", chart_readme)
        assert not outside_links, f"the chart README links outside the package: {outside_links}"
        assert "(RUNBOOK.md)" in chart_readme, "the chart README does not link RUNBOOK.md"
        notes = next(v for k, v in chart.render(SCENARIOS["alerts"], name=RELEASE, namespace=NAMESPACE, is_install=True).items() if k.endswith("NOTES.txt"))
        assert "RUNBOOK.md" in notes, f"NOTES.txt does not say where the runbooks are:\n{notes}"
        assert "app_kubernetes_io_instance=tcab-dispatcher" in notes, f"NOTES.txt does not warn that the rules need the instance label without the PodMonitor:\n{notes}"
        return f"{len(ALERTS)} alerts in {RUNBOOK.relative_to(REPO)}"

    run.check("runbook: travels in the chart (RUNBOOK.md = docs/operations.md#alerts); runbook_url a link or absent", runbook_travels)

    def promtool_tests() -> str:
        promtool = shutil.which("promtool")
        if not promtool:
            raise Skip("promtool is not installed (Debian: apt-get install prometheus)")
        (pr,) = need("alerts").of_kind("PrometheusRule")
        with tempfile.TemporaryDirectory(prefix="tcab-alerts-") as tmp:
            rules = Path(tmp) / "rules.yaml"
            rules.write_text(yaml.safe_dump(pr["spec"], sort_keys=False), encoding="utf-8")
            shutil.copy(ALERTS_TEST, Path(tmp) / ALERTS_TEST.name)
            for args in (["check", "rules", str(rules)], ["test", "rules", str(Path(tmp) / ALERTS_TEST.name)]):
                done = subprocess.run([promtool, *args], capture_output=True, text=True, cwd=tmp, check=False)
                assert done.returncode == 0, f"promtool {' '.join(args[:2])}: {done.stdout}{done.stderr}"
            # Every other rendering of the rules is valid too (thresholds, per-alert settings).
            for name in ("every-value", "alerts-per-alert", "alerts-severity"):
                (other,) = need(name).of_kind("PrometheusRule")
                path = Path(tmp) / f"{name}.rules.yaml"
                path.write_text(yaml.safe_dump(other["spec"], sort_keys=False), encoding="utf-8")
                done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, check=False)
                assert done.returncode == 0, f"promtool check rules [{name}]: {done.stdout}{done.stderr}"
        version = subprocess.run([promtool, "--version"], capture_output=True, text=True, check=False).stdout.split("\n")[0]
        return f"{ALERTS_TEST.relative_to(REPO)} ({version})"

    run.check("alerts: promtool check rules and promtool test rules on the rendered rules", promtool_tests)

    def dashboard() -> str:
        doc_metrics = documented_metrics()
        board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        exprs = dashboard_exprs(board)
        assert exprs, "the dashboard has no queries"
        used: set[str] = set()
        unknown: set[str] = set()
        for expr in exprs:
            for name in re.findall(r"\btcab_dispatcher_[a-z0-9_]+", expr):
                base = name
                for suffix in ("_bucket", "_sum", "_count"):
                    if name.endswith(suffix) and doc_metrics.get(name[: -len(suffix)]) == "histogram":
                        base = name[: -len(suffix)]
                (used if base in doc_metrics else unknown).add(base)
        assert not unknown, f"the dashboard queries metrics docs/metrics.md does not list: {sorted(unknown)}"
        unused = sorted(set(doc_metrics) - used)
        assert not unused, f"documented metrics no panel shows: {unused}"
        titles = [p["title"] for p in board["panels"] if p.get("type") != "row"]
        return f"{len(titles)} panels, {len(exprs)} queries over {len(used)} metrics"

    run.check("dashboard: valid JSON; queries only (and all) the metrics of docs/metrics.md", dashboard)

    def dashboard_configmap() -> None:
        r = need("every-value")
        maps = r.of_kind("ConfigMap")
        assert len(maps) == 1, f"{len(maps)} ConfigMaps"
        cm = maps[0]
        assert cm["metadata"]["namespace"] == MONITORING_NS, cm["metadata"]
        assert cm["metadata"]["labels"].get("grafana_dashboard") == "1", cm["metadata"]["labels"]
        assert cm["metadata"]["labels"].get("team") == "benchmarks", cm["metadata"]["labels"]
        assert cm["metadata"]["annotations"] == {"k8s-sidecar-target-directory": "/tmp/dashboards/tcab"}
        (key,) = cm["data"]
        assert key == f"tcab-dispatcher-{NAMESPACE}-{RELEASE}.json", f"key {key!r} (the sidecar writes each key as a file in one folder)"
        shipped = json.loads(cm["data"][key])
        # The release's own uid, title and first selection; the rest as shipped.
        for variable in shipped["templating"]["list"]:
            variable["current"] = {}
        want = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        assert {k: v for k, v in shipped.items() if k not in ("uid", "title")} == {k: v for k, v in want.items() if k not in ("uid", "title")}, (
            "content differs"
        )
        assert not need("defaults").of_kind("ConfigMap"), "a dashboard ConfigMap by default"

    run.check("dashboard ConfigMap (metrics.dashboard.enabled): the shipped JSON, labelled for the sidecar", dashboard_configmap)

    def dashboard_per_release() -> str:
        board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        variables = {v["name"]: v for v in board.get("templating", {}).get("list", [])}
        for name in ("cluster", "namespace", "release"):
            assert variables.get(name, {}).get("type") == "query", f"no query variable {name!r}: {sorted(variables)}"
        unfiltered = []
        for expr in dashboard_exprs(board):
            for metric, matchers in re.findall(r'\b([a-z_:][a-z0-9_:]*)\{((?:[^}"]|"(?:[^"\\]|\\.)*")*)\}', expr):
                want = ['cluster=~"$cluster"', 'namespace=~"$namespace"']
                if not metric.startswith("kube_"):  # kube-state-metrics' series carry no pod labels
                    want.append('app_kubernetes_io_instance=~"$release"')
                missing = [w for w in want if w not in matchers]
                if missing and not expr.startswith("label_values("):
                    unfiltered.append(f"{metric}: {missing}")
        assert not unfiltered, f"queries not filtered by cluster, namespace and release: {unfiltered[:5]}"
        # One dashboard per release: its own uid (Grafana's limit is 40 characters) and title.
        uids: dict[str, tuple[str, str]] = {}
        titles: set[str] = set()
        values = merged({"metrics": {"dashboard": {"enabled": True}}})
        for release, namespace in [(RELEASE, NAMESPACE), (RELEASE, "tcab-staging"), ("tcab", NAMESPACE), ("r" * 53, NAMESPACE)]:
            (cm,) = render(chart, values, name=release, namespace=namespace).of_kind("ConfigMap")
            (text,) = cm["data"].values()
            shipped = json.loads(text)
            uid = shipped["uid"]
            assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", uid), f"uid {uid!r} is not a Grafana uid of at most 40 characters"
            assert uid not in uids, f"{release}/{namespace} has the uid of {uids[uid]}: {uid}"
            uids[uid] = (release, namespace)
            assert shipped["title"] not in titles, f"title {shipped['title']!r} twice"
            titles.add(shipped["title"])
            current = {v["name"]: v.get("current", {}).get("value") for v in shipped["templating"]["list"]}
            assert current.get("release") == release and current.get("namespace") == namespace, f"opens on {current}"
        return f"{len(uids)} releases, uids like {next(iter(uids))}"

    run.check("dashboard: cluster, namespace and release variables filter every query; a uid and title per release", dashboard_per_release)

    def dashboard_memory_limit() -> None:
        board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
        panel = next(p for p in board["panels"] if p.get("title") == "Resident memory by container")
        exprs = [t["expr"] for t in panel["targets"]]
        limit = [e for e in exprs if "kube_pod_container_resource_limits" in e and 'resource="memory"' in e]
        assert limit, f"the memory panel draws no limit: {exprs}"
        assert 'app_kubernetes_io_instance=~"$release"' in limit[0], f"the limit line is not the release's: {limit[0]}"

    run.check("dashboard: the memory panel draws each container's memory limit (kube-state-metrics)", dashboard_memory_limit)

    def network_policy() -> str:
        for name in SCENARIOS:
            if not SCENARIOS[name].get("networkPolicy", {}).get("enabled"):
                assert not need(name).of_kind("NetworkPolicy"), f"[{name}] a NetworkPolicy although networkPolicy.enabled is off"
        tcp = lambda *ports: [{"port": p, "protocol": "TCP"} for p in ports]  # noqa: E731
        dns_ports = [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]
        r = need("network-policy")
        np = r.one("NetworkPolicy")
        spec = np["spec"]
        pod_labels = r.deployment()["spec"]["template"]["metadata"]["labels"]
        assert spec["podSelector"]["matchLabels"].items() <= pod_labels.items(), "selects no dispatcher pod"
        assert spec["policyTypes"] == ["Ingress", "Egress"], spec["policyTypes"]
        # Ingress: the three metrics ports only, from anywhere by default (the kubelet's probes
        # come from the node, which a NetworkPolicy never blocks).
        assert spec["ingress"] == [{"ports": tcp(9090, 9091, 9092)}], spec["ingress"]
        values = SCENARIOS["network-policy"]["networkPolicy"]
        assert spec["egress"] == [
            {"ports": dns_ports},
            {"to": values["apiServer"]["to"], "ports": tcp(443, 6443)},
            {"to": values["backend"]["to"], "ports": tcp(8080)},  # the port of backend.url
        ], spec["egress"]
        every = need("every-value").one("NetworkPolicy")["spec"]
        ev = SCENARIOS["every-value"]["networkPolicy"]
        assert every["ingress"] == [{"from": ev["metricsFrom"], "ports": tcp(9190, 9191, 9192)}], every["ingress"]
        assert every["egress"] == [
            {"to": ev["dns"]["to"], "ports": dns_ports},
            {"to": ev["apiServer"]["to"], "ports": tcp(6443)},
            {"to": ev["backend"]["to"], "ports": tcp(8081)},
            *ev["extraEgress"],
        ], every["egress"]
        # Metrics off: nothing may come in at all.
        off = render(chart, merged(SCENARIOS["network-policy"], {"metrics": {"enabled": False}})).one("NetworkPolicy")["spec"]
        assert off["ingress"] == [] and off["policyTypes"] == ["Ingress", "Egress"], off
        # A backend URL without a port: its scheme's.
        https = render(chart, merged(SCENARIOS["network-policy"], {"backend": {"url": "https://tcab-backend.tcab.svc"}})).one("NetworkPolicy")
        assert https["spec"]["egress"][2]["ports"] == tcp(443), https["spec"]["egress"][2]
        return f"{len(spec['egress'])} egress rules, ingress to the metrics ports only"

    run.check("NetworkPolicy (networkPolicy.enabled): ingress to the metrics ports only; egress to DNS, the API server, the backend", network_policy)

    def notes() -> None:
        out = chart.render(SCENARIOS["every-value"], name=RELEASE, namespace=NAMESPACE, is_install=True)
        text = next(v for k, v in out.items() if k.endswith("NOTES.txt"))
        want = f"kubectl -n {NAMESPACE} get jobs -l app.kubernetes.io/managed-by=tcab-dispatcher-blue -L tcab.dev/job-kind,tcab.dev/job-id"
        assert want in text, f"NOTES.txt lacks {want!r}:\n{text}"
        assert "9190/metrics" in text, f"NOTES.txt does not say where the metrics are:\n{text}"
        off = chart.render(SCENARIOS["metrics-off"], name=RELEASE, namespace=NAMESPACE, is_install=True)
        off_text = next(v for k, v in off.items() if k.endswith("NOTES.txt"))
        assert "managed-by=tcab-dispatcher -L" in off_text and "/metrics" not in off_text, off_text

    run.check("NOTES.txt: a kubectl get jobs -L tcab.dev/job-kind,tcab.dev/job-id recipe; where the metrics are", notes)

    # --- the `helm test` hook (templates/tests/check.yaml)
    def test_hook() -> str:
        """The hook pod runs `tcab-admitter check` as the admitter container runs."""
        checked = []
        for name in ("defaults", "every-value", "publishing", "sandbox-elsewhere", "existing-service-account"):
            r = need(name)
            pods = r.of_kind("Pod")
            assert len(pods) == 1, f"[{name}] {len(pods)} Pods; expected the test hook alone"
            hook = pods[0]
            meta = hook["metadata"]
            annotations = meta.get("annotations") or {}
            assert annotations.get("helm.sh/hook") == "test", f"[{name}] helm.sh/hook = {annotations.get('helm.sh/hook')}"
            assert annotations.get("helm.sh/hook-delete-policy") == "before-hook-creation,hook-succeeded", (
                f"[{name}] hook-delete-policy = {annotations.get('helm.sh/hook-delete-policy')}"
            )
            assert meta["namespace"] == NAMESPACE, meta
            pod = hook["spec"]
            deployment = r.deployment()["spec"]
            selector = deployment["selector"]["matchLabels"]
            labels = meta.get("labels") or {}
            assert not selector.items() <= labels.items(), (
                f"[{name}] the hook pod carries the dispatcher pod's selector {selector}: a ReplicaSet or the PodMonitor would take it"
            )
            assert labels.get("app.kubernetes.io/instance") == RELEASE, labels
            template = deployment["template"]["spec"]
            assert pod.get("restartPolicy") == "Never", f"[{name}] restartPolicy {pod.get('restartPolicy')}"
            for key in (
                "serviceAccountName",
                "automountServiceAccountToken",
                "securityContext",
                "imagePullSecrets",
                "nodeSelector",
                "affinity",
                "tolerations",
                "priorityClassName",
                "volumes",
                "enableServiceLinks",
            ):
                assert pod.get(key) == template.get(key), f"[{name}] {key}: hook {pod.get(key)!r}, dispatcher {template.get(key)!r}"
            (container,) = pod["containers"]
            admitter = r.containers()["admitter"]
            assert container.get("command") == ["tcab-admitter"] and container.get("args") == ["check"], (
                f"[{name}] runs {container.get('command')} {container.get('args')}"
            )
            for key in ("image", "imagePullPolicy", "env", "securityContext", "volumeMounts", "resources", "terminationMessagePolicy"):
                assert container.get(key) == admitter.get(key), (
                    f"[{name}] {key}: hook {container.get(key)!r}, admitter {admitter.get(key)!r}"
                )
            assert "ports" not in container and "livenessProbe" not in container, f"[{name}] the check serves nothing"
            checked.append(name)
        assert not need("tests-off").of_kind("Pod"), "tests.enabled false still renders the hook"
        return f"{len(checked)} scenarios"

    run.check("helm test hook: a Pod running tcab-admitter check with the admitter's image, env, Secret, ServiceAccount and securityContext", test_hook)

    def test_hook_notes() -> None:
        out = chart.render(SCENARIOS["defaults"], name=RELEASE, namespace=NAMESPACE, is_install=True)
        text = next(v for k, v in out.items() if k.endswith("NOTES.txt"))
        want = f"helm test {RELEASE} -n {NAMESPACE} --logs"
        assert want in text, f"NOTES.txt lacks {want!r}:\n{text}"
        off = chart.render(SCENARIOS["tests-off"], name=RELEASE, namespace=NAMESPACE, is_install=True)
        off_text = next(v for k, v in off.items() if k.endswith("NOTES.txt"))
        assert "helm test" not in off_text, off_text
        readme = README.read_text(encoding="utf-8")
        assert "helm test tcab-dispatcher -n tcab --logs" in readme, "the README does not show helm test"

    run.check("helm test hook: NOTES.txt and the README say how to run it", test_hook_notes)

    def no_service() -> None:
        for name in SCENARIOS:
            r = need(name)
            kinds = {d["kind"] for d in r.docs}
            assert "Service" not in kinds and "Ingress" not in kinds, f"[{name}] renders {kinds}"
            for c in r.containers().values():
                assert all("hostPort" not in p for p in c.get("ports", [])), f"[{name}] hostPort"
            assert not r.deployment()["spec"]["template"]["spec"].get("hostNetwork"), f"[{name}] hostNetwork"

    run.check("no Service in any scenario", no_service)

    def role_rules() -> None:
        r = need("defaults")
        roles = r.of_kind("Role")
        assert len(roles) == 1, f"expected one Role, found {len(roles)}"
        got = rules_of(roles[0])
        assert got == DISPATCHER_RULES, (
            f"missing: {fmt_rules(DISPATCHER_RULES - got) or '-'}; extra: {fmt_rules(got - DISPATCHER_RULES) or '-'}"
        )
        assert not r.of_kind("ClusterRole") and not r.of_kind("ClusterRoleBinding"), "cluster-wide RBAC"

    run.check("Role: exactly batch/jobs create,get,list,watch,delete; pods get,list,delete; pods/log get; events list; events.k8s.io/events create", role_rules)

    def binding() -> None:
        r = need("defaults")
        sa = r.one("ServiceAccount")
        role = r.one("Role")
        rb = r.one("RoleBinding")
        assert rb["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }, f"roleRef = {rb['roleRef']}"
        want = [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
        assert rb["subjects"] == want, f"subjects = {rb['subjects']}"
        pod = r.deployment()["spec"]["template"]["spec"]
        assert pod.get("serviceAccountName") == sa["metadata"]["name"], "pod does not run as the ServiceAccount"

    run.check("RoleBinding binds the Role to the dispatcher's ServiceAccount", binding)

    def token_from_secret() -> None:
        for name in ("defaults", "subscription-secrets-memory"):
            r = need(name)
            want_secret = "tcab-backend-token" if name == "defaults" else f"{RELEASE}-backend-token"
            # The reaper too, while the orphan sweep (on by default) asks the backend.
            for cname in CONTAINERS:
                entry = r.env(cname).get("TCAB_BACKEND_SERVICE_TOKEN")
                assert entry, f"[{name}] {cname}: no TCAB_BACKEND_SERVICE_TOKEN"
                assert "value" not in entry, f"[{name}] {cname}: token given as a plain value"
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                assert ref == {"name": want_secret, "key": "token"}, f"[{name}] {cname}: secretKeyRef = {ref}"
        # Without the sweep the reaper never calls the backend: no URL, no token.
        swept_off = need("every-value").env("reaper")
        for var in ("TCAB_BACKEND_SERVICE_TOKEN", "TCAB_BACKEND_URL", "TCAB_DISPATCHER_BACKEND_TIMEOUT_SECONDS"):
            assert var not in swept_off, f"[every-value] the reaper gets {var} with the sweep off"
        # the chart-created Secret holds the value; no manifest carries it in clear
        r = need("subscription-secrets-memory")
        secret = r.one("Secret")
        assert secret["metadata"]["name"] == f"{RELEASE}-backend-token", secret["metadata"]["name"]
        assert base64.b64decode(secret["data"]["token"]).decode() == TOKEN_VALUE, "Secret data.token"
        clear = [d["kind"] for d in r.docs if TOKEN_VALUE in yaml.safe_dump(d)]
        assert not clear, f"token in clear in {clear}"
        assert not need("defaults").of_kind("Secret"), "a Secret is created although existingSecret is set"

    run.check(
        "service token comes from a secretKeyRef (existing or chart-created Secret); the reaper's only with the sweep on",
        token_from_secret,
    )

    def driver_managed_by() -> str:
        label_value = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
        # By default the binaries' own value, the one a driver uses when nothing
        # tells it otherwise, the same for every release.
        for release, namespace in [(RELEASE, NAMESPACE), ("blue", "tcab-staging")]:
            r = render(chart, base_values(), name=release, namespace=namespace)
            for cname in ("admitter", "reaper"):
                got = r.env(cname)["TCAB_DRIVER_MANAGED_BY"]["value"]
                assert got == "tcab-driver", f"[{release}/{namespace}] {cname}: {got!r}, want tcab-driver"
        # Opt-in: a value unique to each release, for namespaces several dispatchers share.
        releases = [(RELEASE, NAMESPACE), (RELEASE, "tcab-staging"), ("blue", NAMESPACE), ("r" * 53, NAMESPACE)]
        values: dict[tuple[str, str], str] = {}
        per_release = merged({"driver": {"managedByPerRelease": True}})
        for release, namespace in releases:
            r = render(chart, per_release, name=release, namespace=namespace)
            admitter = r.env("admitter")["TCAB_DRIVER_MANAGED_BY"]["value"]
            reaper = r.env("reaper")["TCAB_DRIVER_MANAGED_BY"]["value"]
            assert admitter == reaper, f"[{release}/{namespace}] admitter {admitter!r}, reaper {reaper!r}"
            assert len(admitter) <= 63 and label_value.match(admitter), f"not a label value: {admitter!r}"
            dispatcher = r.env("admitter").get("TCAB_DISPATCHER_MANAGED_BY", {}).get("value", "tcab-dispatcher")
            assert admitter != dispatcher, f"[{release}/{namespace}] same as the dispatcher's: {admitter!r}"
            values[(release, namespace)] = admitter
        assert len(set(values.values())) == len(values), f"not unique per release: {values}"
        given = render(chart, merged({"driver": {"managedBy": "tcab-driver-green", "managedByPerRelease": True}}))
        for cname in ("admitter", "reaper"):
            assert given.env(cname)["TCAB_DRIVER_MANAGED_BY"]["value"] == "tcab-driver-green", f"{cname}: value not used"
        return f"tcab-driver by default; per release: {values[(RELEASE, NAMESPACE)]}"

    run.check(
        "driver managed-by: tcab-driver by default, unique to each release when opted in, a label value, on admitter and reaper",
        driver_managed_by,
    )

    def default_env() -> None:
        r = need("defaults")
        for cname, want in DEFAULT_ENV.items():
            got = set(r.env(cname))
            assert got == want, f"{cname}: extra {sorted(got - want)}, missing {sorted(want - got)}"
        env = r.env("admitter")
        assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert env["TCAB_BACKEND_URL"]["value"] == "http://tcab-backend.tcab.svc:8080"
        assert env["TCAB_DRIVER_IMAGE"]["value"] == "registry.example/tcab-driver:3f2a9c1"
        assert env["TCAB_DISPATCHER_LOG_FORMAT"]["value"] == "json"
        assert r.env("reaper")["TCAB_K8S_NAMESPACE"]["value"] == NAMESPACE

    run.check("env: required values rendered, unset values left to the binaries' defaults", default_env)

    def every_value_env() -> None:
        r = need("every-value")
        for cname in CONTAINERS:
            want = dict(EVERY_VALUE_ENV["common"])
            if cname != "reaper":
                want.update(EVERY_VALUE_ENV["backend"])
            want.update(EVERY_VALUE_ENV[cname])
            env = r.env(cname)
            got = {k: e.get("value") for k, e in env.items() if "value" in e}
            wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
            assert not wrong, f"{cname}: (got, want) {wrong}"
            extra = set(got) - set(want)
            assert not extra, f"{cname}: unexpected {sorted(extra)}"

    run.check("env: every tuning value renders its variable, whole numbers without exponent", every_value_env)

    def publishing() -> None:
        r = need("publishing")
        for cname in ("admitter", "lease-keeper"):
            entry = r.env(cname).get("TCAB_PUBLISHER_IMAGE")
            assert entry and entry.get("value") == PUBLISHER_IMAGE, f"{cname}: TCAB_PUBLISHER_IMAGE = {entry}"
        assert "TCAB_PUBLISHER_IMAGE" not in r.env("reaper"), "reaper gets TCAB_PUBLISHER_IMAGE"
        for cname in CONTAINERS:
            assert "TCAB_PUBLISHER_IMAGE" not in need("defaults").env(cname), f"defaults: {cname} publishes"

    run.check("publishing: TCAB_PUBLISHER_IMAGE on admitter and lease-keeper only when set", publishing)

    def sandbox_elsewhere() -> None:
        r = need("sandbox-elsewhere")
        role = r.one("Role", SANDBOX_NS)
        got = rules_of(role)
        assert got == SANDBOX_RULES, f"sandbox Role: {fmt_rules(got)}"
        rb = r.one("RoleBinding", SANDBOX_NS)
        assert rb["roleRef"]["kind"] == "Role" and rb["roleRef"]["name"] == role["metadata"]["name"], rb["roleRef"]
        sa = r.one("ServiceAccount")["metadata"]["name"]
        assert rb["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}], rb["subjects"]
        assert rules_of(r.one("Role")) == DISPATCHER_RULES, "the dispatcher Role changed"
        assert r.env("reaper")["TCAB_K8S_NAMESPACE"]["value"] == SANDBOX_NS, "reaper sandbox namespace"
        assert r.env("admitter")["TCAB_K8S_NAMESPACE"]["value"] == SANDBOX_NS, "driver sandbox namespace"
        assert "TCAB_K8S_NAMESPACE" not in need("defaults").env("admitter"), "defaults: admitter sets a sandbox ns"
        same = need("sandbox-same-namespace")
        assert len(same.of_kind("Role")) == 1 and len(same.of_kind("RoleBinding")) == 1, (
            "sandbox namespace = release namespace must add no Role"
        )

    run.check("sandbox namespace elsewhere: extra Role (pods get,list,delete) + RoleBinding there", sandbox_elsewhere)

    def subscription() -> None:
        r = need("subscription-secrets-memory")
        env = {k: e.get("value") for k, e in r.env("admitter").items()}
        want = {
            "TCAB_DRIVER_SECRETS": "provider-api-keys,git-credentials",
            "TCAB_DRIVER_SUBSCRIPTION_SECRET": "claude-subscription",
            "TCAB_DRIVER_SUBSCRIPTION_DIR": "/home/driver/.claude",
            "TCAB_DRIVER_FS_GROUP": "2000",
            "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT": "6Gi",
            "TCAB_CONTAINER_IMAGE_PYTHON": "registry.example/run-python:3f2a9c1",
            "TCAB_K8S_SANDBOX_NODE_SELECTOR": "pool=sandbox",
        }
        wrong = {k: (env.get(k), v) for k, v in want.items() if env.get(k) != v}
        assert not wrong, f"(got, want) {wrong}"
        for cname in ("lease-keeper", "reaper"):
            leaked = set(want) & set(r.env(cname))
            assert not leaked, f"{cname} gets driver settings {sorted(leaked)}"
        assert "TCAB_DISPATCHER_DRIVER_MEMORY_LIMIT" not in need("defaults").env("admitter"), (
            "a driver memory limit is set by default"
        )

    run.check("subscription + driver secrets + memory limit + passthrough reach the admitter", subscription)

    def job_security_contexts() -> None:
        names = list(JOB_SECURITY_ENV)
        # Unset: no variable, so the binary's restricted default applies.
        for cname in CONTAINERS:
            left = set(names) & set(need("defaults").env(cname))
            assert not left, f"defaults: {cname} gets {sorted(left)}"
        # Set: the admitter alone gets each, as JSON of exactly the value given.
        r = need("every-value")
        env = r.env("admitter")
        for var, text in JOB_SECURITY_ENV.items():
            assert env.get(var) == {"name": var, "value": text}, f"{var} = {env.get(var)}"
        for lane, key, var in [
            ("driver", "podSecurityContext", names[0]),
            ("driver", "securityContext", names[1]),
            ("publisher", "podSecurityContext", names[2]),
            ("publisher", "securityContext", names[3]),
        ]:
            assert json.loads(env[var]["value"]) == JOB_SECURITY[lane][key], f"{var} is not {lane}.{key}"
        for cname in ("lease-keeper", "reaper"):
            leaked = set(names) & set(r.env(cname))
            assert not leaked, f"{cname} gets {sorted(leaked)}"
        # {}: set, so rendered, as {} (the binary then sets no securityContext).
        off = need("job-security-off").env("admitter")
        got = {var: off.get(var, {}).get("value") for var in names}
        assert got == dict.fromkeys(names, "{}"), f"{{}} renders {got}"

    run.check("Jobs' securityContexts: each value set reaches the admitter as JSON ({} too), unset ones not at all", job_security_contexts)

    def env_declared() -> str:
        declared = declared_settings()
        problems = []
        for name in SCENARIOS:
            r = need(name)
            passthrough = set(SCENARIOS[name].get("driver", {}).get("passthroughEnv", {}))
            extra = {e["name"] for e in SCENARIOS[name].get("extraEnv", [])}
            for cname in CONTAINERS:
                allowed = declared.per_container[cname] | extra
                if cname in declared.passthrough_containers:  # passed through to driver pods
                    bad = sorted(k for k in passthrough if not k.startswith(declared.passthrough_prefixes))
                    assert not bad, f"[{name}] passthrough keys {bad} lack the prefixes {declared.passthrough_prefixes}"
                    allowed = allowed | passthrough
                undeclared = set(r.env(cname)) - allowed
                if undeclared:
                    problems.append(f"[{name}] {cname}: {sorted(undeclared)}")
        assert not problems, f"not read by the container's binary ({SETTINGS_JSON.name}): " + "; ".join(problems)
        return f"{len(declared.variables)} variables in {SETTINGS_JSON.relative_to(REPO)}, checked per binary"

    run.check("env: every variable a container gets is one its binary reads (charts/settings.json)", env_declared)

    def env_values_fit() -> str:
        declared = declared_settings()
        problems = []
        checked = 0
        for name in SCENARIOS:
            for cname in CONTAINERS:
                for var, entry in need(name).env(cname).items():
                    if "value" not in entry or var not in declared.variables:
                        continue
                    checked += 1
                    why = value_fits(str(entry["value"]), declared.variables[var])
                    if why:
                        problems.append(f"[{name}] {cname}: {var}={entry['value']!r}: {why}")
        assert not problems, "; ".join(problems)
        return f"{checked} values"

    run.check("env: every rendered value fits its variable's declared type and minimum", env_values_fit)

    def env_every_reader() -> str:
        declared = declared_settings()
        problems = []
        for name, values in SCENARIOS.items():
            r = need(name)
            envs = {cname: r.env(cname) for cname in CONTAINERS}
            for var, v in declared.variables.items():
                readers = declared.readers(var)
                having = [c for c in readers if var in envs[c]]
                if not having and not v["required"]:
                    continue  # left to the binaries' default
                for cname in readers:
                    if var in envs[cname]:
                        continue
                    left_out = LEFT_OUT.get((cname, var))
                    if left_out and left_out[0](values):
                        continue
                    problems.append(f"[{name}] {var} is set for {having or 'no container'} but not {cname}")
                given = {json.dumps(envs[c][var], sort_keys=True) for c in having}
                if len(given) > 1 and var not in PER_CONTAINER:
                    problems.append(f"[{name}] {var} differs between {having}: {sorted(given)}")
        assert not problems, "; ".join(problems)
        return None

    run.check(
        "env: a variable set for one binary that reads it is set, to the same value, for every binary that reads it",
        env_every_reader,
    )

    def documented_defaults() -> str:
        declared = declared_settings()
        problems = []
        compared = 0
        # values.yaml comments: "(VARIABLE; binary default X)"
        comments = " ".join(
            line.strip().lstrip("#").strip() for line in VALUES.read_text(encoding="utf-8").splitlines() if line.strip().startswith("#")
        )
        # "derived" (from another value) stands for no declared default.
        for var, default in re.findall(r"\(([A-Z][A-Z0-9_]+); binary default ([^,;)\s]+)", comments):
            compared += 1
            want = (declared.variables.get(var) or {}).get("default") or "derived"
            if default != want:
                problems.append(f"values.yaml: {var} binary default {default}, declared {want}")
        # README values table: "| `value` | `VARIABLE` (readers) | ... binary: X |"
        readme = README.read_text(encoding="utf-8")
        row = re.compile(r"^\| `[^`]+` \| `([A-Z][A-Z0-9_]+)`([^|]*)\|([^|]*)\|", flags=re.M)
        for var, readers_cell, default_cell in row.findall(readme):
            v = declared.variables.get(var)
            if v is None:
                problems.append(f"README: {var} is not a variable the binaries read")
                continue
            named = set(re.findall(r"\b(admitter|lease-keeper|reaper|all)\b", readers_cell))
            if named:
                compared += 1
                named = set(CONTAINERS) if "all" in named else named
                want = set(declared.readers(var))
                if named != want:
                    problems.append(f"README: {var} read by {sorted(named)}, declared {sorted(want)}")
            binary_default = re.search(r"binary: `?([^`)\s|]+)`?", default_cell)
            if binary_default:
                compared += 1
                if binary_default.group(1) != (v["default"] or "derived"):
                    problems.append(f"README: {var} binary default {binary_default.group(1)}, declared {v['default']}")
        assert not problems, "; ".join(problems)
        assert compared, "found no documented default to compare"
        return f"{compared} statements compared"

    run.check(
        "docs: readers and binary defaults in values.yaml and the README are the declared ones (charts/settings.json)",
        documented_defaults,
    )

    def schema_bounds() -> str:
        declared = declared_settings()
        readme = README.read_text(encoding="utf-8")
        problems = []
        compared = 0
        # The README values table maps each value to the variable it renders.
        for path, var in re.findall(r"^\| `([A-Za-z][A-Za-z0-9_.]*)` \| `([A-Z][A-Z0-9_]+)`", readme, flags=re.M):
            v = declared.variables.get(var)
            if v is None or v["type"] not in ("integer", "number", "boolean"):
                continue  # strings: the schema's patterns are the chart's own, stricter or looser
            node: dict[str, Any] | None = chart.schema or {}
            for part in path.split("."):
                node = ((node or {}).get("properties") or {}).get(part)
            if node is None:
                problems.append(f"{path}: not in values.schema.json")
                continue
            compared += 1
            types = node.get("type")
            types = set(types) if isinstance(types, list) else {types}
            if v["type"] not in types:
                problems.append(f"{path}: schema type {sorted(t for t in types if t)}, {var} is {v['type']}")
            minimum = v.get("minimum")
            want = {}
            if minimum:
                want = {"exclusiveMinimum" if minimum["exclusive"] else "minimum": minimum["value"]}
            got = {k: node[k] for k in ("minimum", "exclusiveMinimum") if k in node}
            if got != want:
                problems.append(f"{path}: schema bounds {got}, {var} accepts {want or 'any'}")
        assert not problems, "; ".join(problems)
        assert compared, "no numeric or boolean value found in the README table"
        return f"{compared} values"

    run.check("schema: numeric and boolean values have their variable's declared type and minimum", schema_bounds)

    def documented() -> str:
        text = VALUES.read_text(encoding="utf-8")
        missing_comment = uncommented_keys(text)
        assert not missing_comment, f"values.yaml keys without a comment: {missing_comment}"
        paths = value_paths(yaml.safe_load(text))
        readme = README.read_text(encoding="utf-8")
        section = re.search(r"^## Values\n(.*?)(?=^## )", readme, flags=re.M | re.S)
        assert section, "README has no '## Values' section"
        readme = section.group(1)
        table = set(re.findall(r"^\| `([A-Za-z][A-Za-z0-9_.]*)` \|", readme, flags=re.M))
        assert paths == table, f"README values table lacks {sorted(paths - table)}, has unknown {sorted(table - paths)}"
        schema_keys = value_paths_of_schema(chart.schema or {})
        unschema = sorted(p for p in paths if not any(p == s or p.startswith(s + ".") for s in schema_keys))
        assert not unschema, f"values.schema.json does not describe {unschema}"
        return f"{len(paths)} values"

    run.check("docs: every value commented in values.yaml, in the README table and in the schema", documented)

    # --- refusals
    for what, values, needles in SCHEMA_REFUSALS:

        def do_refuse(values: dict[str, Any] = values, needles: list[str] = needles) -> str:
            message = render_error(chart, values)
            missing = [n for n in needles if n not in message]
            assert not missing, f"message lacks {missing}: {message!r}"
            return first_line(message)

        run.check(f"refused by the schema: {what}", do_refuse)

    with tempfile.TemporaryDirectory(prefix="tcab-chart-") as tmp:
        # The same chart without values.schema.json: proves the templates refuse on their own.
        bare_dir = Path(tmp) / CHART.name
        shutil.copytree(CHART, bare_dir, ignore=shutil.ignore_patterns("values.schema.json", "tests"))
        bare = helm.Chart.load(bare_dir)
        for what, values, needles, also_full in TEMPLATE_REFUSALS:
            targets = [("template", bare)] + ([("chart", chart)] if also_full else [])
            for layer, target in targets:

                def do_refuse(
                    values: dict[str, Any] = values, needles: list[str] = needles, target: Any = target
                ) -> str:
                    message = render_error(target, values)
                    missing = [n for n in needles if n not in message]
                    assert not missing, f"message lacks {missing}: {message!r}"
                    return first_line(message)

                run.check(f"refused by the {layer}: {what}", do_refuse)
        bare.close()

    # --- the image (Dockerfile, .dockerignore)
    check_image.checks(run, lambda: need("defaults"), Skip)

    # --- the release's versions (Chart.yaml, Cargo.toml, CHANGELOG.md)
    check_release.checks(run)

    # --- the golden Role
    def golden() -> str | None:
        role = need("defaults").one("Role")
        if args.update_golden:
            GOLDEN.parent.mkdir(parents=True, exist_ok=True)
            GOLDEN.write_text(golden_text(role), encoding="utf-8")
            return f"rewrote {GOLDEN.relative_to(REPO)}"
        assert GOLDEN.exists(), f"{GOLDEN.relative_to(REPO)} is missing; run with --update-golden"
        stored = yaml.safe_load(GOLDEN.read_text(encoding="utf-8"))
        assert stored == role, (
            f"the rendered Role differs from {GOLDEN.relative_to(REPO)}; review the change, then run "
            "with --update-golden"
        )
        assert GOLDEN.read_text(encoding="utf-8") == golden_text(role), (
            f"{GOLDEN.relative_to(REPO)} is equal in content but not in layout; run with --update-golden"
        )
        return None

    run.check(f"golden: rendered dispatcher Role matches {GOLDEN.relative_to(REPO)}", golden)

    chart.close()
    tail = f", {run.skipped} skipped" if run.skipped else ""
    print(f"{run.passed} passed, {run.failed} failed{tail}")
    return 1 if run.failed else 0


def markdown_anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown document's headings."""
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", text, flags=re.M):
        slug = re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def runbook_text() -> str:
    """RUNBOOK.md as it must read: the Alerts section of docs/operations.md, its links
    to anything but its own headings (or the web) kept as their text."""
    doc = OPERATIONS_DOC.read_text(encoding="utf-8")
    section = re.search(r"^## Alerts\n.*?(?=^## )", doc, flags=re.M | re.S)
    assert section, f"{OPERATIONS_DOC.relative_to(REPO)} has no '## Alerts' section"
    body = section.group(0).rstrip() + "\n"
    own = markdown_anchors(body)

    def unlink(m: re.Match[str]) -> str:
        text, target = m.group(1), m.group(2)
        if target.startswith(("http://", "https://")) or (target.startswith("#") and target[1:] in own):
            return m.group(0)
        return text

    body = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", unlink, body)
    body = body.replace("## Alerts\n", "", 1).lstrip("\n")
    header = (
        "# tcab-dispatcher alert runbooks\n\n"
        "What each alert of this chart's PrometheusRule means and what to do, one section per alert\n"
        "(its anchor is the alert's name in lower case: set `metrics.prometheusRule.runbookUrl` to\n"
        "where your team reads this file, and each alert's `runbook_url` is that plus `#<anchor>`).\n"
        "Copied from the repository's `docs/operations.md` (section Alerts), which has the rest of\n"
        "the operations guide; do not edit here: `charts/check_chart.py --update-runbook` rewrites it.\n\n"
    )
    return header + re.sub(r"^### ", "## ", body, flags=re.M)


def first_line(message: str) -> str:
    """The most telling line of a Helm error, for the PASS line."""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    meaningful = [ln for ln in lines if ln.startswith("- at") or "error" in ln or "required" in ln]
    return (meaningful or lines or [""])[0][:160]


def value_paths_of_schema(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths the schema names under `properties`."""
    paths: set[str] = set()
    for key, sub in (schema.get("properties") or {}).items():
        path = f"{prefix}{key}"
        paths.add(path)
        paths |= value_paths_of_schema(sub, f"{path}.")
    return paths


def golden_text(role: dict[str, Any]) -> str:
    header = (
        "# The dispatcher Role as the chart renders it with default values\n"
        f"# (release {RELEASE}, namespace {NAMESPACE}). Generated: do not edit; run\n"
        "#   python3 charts/check_chart.py --update-golden\n"
        "# The e2e tests load this Role into the simulated cluster's RBAC mode.\n"
    )
    return header + yaml.safe_dump(role, sort_keys=False, default_flow_style=False)


if __name__ == "__main__":
    sys.exit(main())
