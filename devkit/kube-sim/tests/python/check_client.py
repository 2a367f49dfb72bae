"""Drives a running kube-sim with the official Python `kubernetes` client.

Usage: python check_client.py KUBECONFIG NAMESPACE

Each check prints `ok <name>`; the first failure prints `FAIL <name>: why` and
exits 1. Exits 3 when the `kubernetes` package is not importable, so the
caller can tell a missing package from a failure.
"""

import json
import sys
import time
import uuid

try:
    from kubernetes import client, config, watch
    from kubernetes.client.rest import ApiException
except ImportError as e:  # pragma: no cover - reported to the caller
    print(f"the kubernetes package is not importable: {e}")
    sys.exit(3)

DEADLINE = 20.0


class CheckFailed(Exception):
    pass


def expect(cond, why):
    if not cond:
        raise CheckFailed(why)


def job_body(name, run_seconds="0.3", labels=None):
    labels = dict(labels or {"suite": "python"})
    return client.V1Job(
        api_version="batch/v1",
        kind="Job",
        metadata=client.V1ObjectMeta(name=name, labels=labels),
        spec=client.V1JobSpec(
            backoff_limit=0,
            ttl_seconds_after_finished=600,
            template=client.V1PodTemplateSpec(
                metadata=client.V1ObjectMeta(
                    labels=labels,
                    annotations={"kube-sim.tcab.dev/run-seconds": run_seconds},
                ),
                spec=client.V1PodSpec(
                    restart_policy="Never",
                    containers=[
                        client.V1Container(
                            name="main",
                            image="busybox:1",
                            env=[
                                client.V1EnvVar(name="GREETING", value="hi"),
                                client.V1EnvVar(
                                    name="POD_IP",
                                    value_from=client.V1EnvVarSource(
                                        field_ref=client.V1ObjectFieldSelector(
                                            field_path="status.podIP"
                                        )
                                    ),
                                ),
                            ],
                            resources=client.V1ResourceRequirements(
                                requests={"cpu": "100m", "memory": "64Mi"},
                                limits={"cpu": "1"},
                            ),
                        )
                    ],
                ),
            ),
        ),
    )


def api_error(call):
    try:
        call()
    except ApiException as e:
        return e
    raise CheckFailed("the call succeeded; an ApiException was expected")


def complete(job):
    conds = (job.status and job.status.conditions) or []
    return any(c.type == "Complete" and c.status == "True" for c in conds)


def check_create_get_list_watch(batch, core, ns):
    name = "py-" + uuid.uuid4().hex[:6]
    w = watch.Watch()
    created = batch.create_namespaced_job(ns, job_body(name))
    expect(created.metadata.uid, "the created Job has a uid")
    expect(
        created.spec.template.spec.containers[0].env[1].value_from.field_ref.api_version == "v1",
        "the fieldRef apiVersion is defaulted to v1",
    )
    got = batch.read_namespaced_job(name, ns)
    expect(got.metadata.name == name, "get returns the Job")
    listed = batch.list_namespaced_job(ns, label_selector="suite=python")
    expect(name in [j.metadata.name for j in listed.items], "list by label finds it")
    # watch=True (how this client asks for a watch) streams the Job until it completes
    seen = []
    for ev in w.stream(
        batch.list_namespaced_job,
        ns,
        label_selector="suite=python",
        resource_version=listed.metadata.resource_version,
        timeout_seconds=int(DEADLINE),
    ):
        job = ev["object"]
        seen.append((ev["type"], job.metadata.name))
        if job.metadata.name == name and complete(job):
            w.stop()
    expect(("MODIFIED", name) in seen, f"the watch saw the Job change: {seen}")
    done = batch.read_namespaced_job(name, ns)
    expect(complete(done) and done.status.succeeded == 1, "the Job completed")
    # and the pod it ran, by the job-name label, through a pod watch from the start
    pod_events = []
    for ev in w.stream(
        core.list_namespaced_pod,
        ns,
        label_selector=f"job-name={name}",
        timeout_seconds=int(DEADLINE),
    ):
        pod_events.append((ev["type"], ev["object"].status.phase))
        w.stop()
    expect(pod_events and pod_events[0][0] == "ADDED", f"the pod watch starts with ADDED: {pod_events}")
    pods = core.list_namespaced_pod(ns, label_selector=f"job-name={name}")
    expect(len(pods.items) == 1, "one pod for the Job")
    expect(pods.items[0].status.phase == "Succeeded", "the pod succeeded")


def check_invalid_job_is_422_with_causes(batch, ns):
    body = job_body("py-bad")
    c = body.spec.template.spec.containers[0]
    c.env[0].name = "1GREETING"
    c.resources.requests["cpu"] = "2"
    body.spec.template.spec.restart_policy = "Always"
    e = api_error(lambda: batch.create_namespaced_job(ns, body))
    expect(e.status == 422, f"422, got {e.status}")
    st = json.loads(e.body)
    expect(st["kind"] == "Status" and st["reason"] == "Invalid", "an Invalid Status")
    causes = {(c["reason"], c["field"]) for c in st["details"]["causes"]}
    for want in [
        ("FieldValueInvalid", "spec.template.spec.containers[0].env[0].name"),
        ("FieldValueInvalid", "spec.template.spec.containers[0].resources.requests"),
        ("FieldValueNotSupported", "spec.template.spec.restartPolicy"),
    ]:
        expect(want in causes, f"cause {want} in {causes}")
    expect(st["message"].startswith('Job.batch "py-bad" is invalid: ['), st["message"])
    gone = api_error(lambda: batch.read_namespaced_job("py-bad", ns))
    expect(gone.status == 404, "nothing was created")


def check_dry_run(batch, core, ns):
    dry = batch.create_namespaced_job(ns, job_body("py-dry"), dry_run="All")
    expect(dry.metadata.uid and dry.metadata.resource_version is None, "a dry-run answer, not stored")
    e = api_error(lambda: batch.read_namespaced_job("py-dry", ns))
    expect(e.status == 404, "the dry-run Job does not exist")
    e = api_error(lambda: batch.create_namespaced_job(ns, job_body("py-dry"), dry_run="Sometimes"))
    expect(e.status == 422 and json.loads(e.body)["details"]["kind"] == "CreateOptions", "a bad dryRun is refused")
    pod = core.create_namespaced_pod(
        ns,
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="py-dry-pod"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox:1")]),
        ),
    )
    # the DeleteOptions body carries dryRun (upstream reads the query only without a body)
    core.delete_namespaced_pod(
        "py-dry-pod", ns, body=client.V1DeleteOptions(dry_run=["All"], grace_period_seconds=0)
    )
    still = core.read_namespaced_pod("py-dry-pod", ns)
    expect(still.metadata.uid == pod.metadata.uid and still.metadata.deletion_timestamp is None, "the pod stays")


def check_delete_preconditions(core, ns):
    pod = core.read_namespaced_pod("py-dry-pod", ns)
    e = api_error(
        lambda: core.delete_namespaced_pod(
            "py-dry-pod",
            ns,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="not-the-uid")),
        )
    )
    expect(e.status == 409, f"409, got {e.status}")
    st = json.loads(e.body)
    expect(st["reason"] == "Conflict", st)
    expect("the UID in the precondition (not-the-uid) does not match the UID in record" in st["message"], st["message"])
    core.read_namespaced_pod("py-dry-pod", ns)  # still there
    core.delete_namespaced_pod(
        "py-dry-pod",
        ns,
        body=client.V1DeleteOptions(
            preconditions=client.V1Preconditions(uid=pod.metadata.uid), grace_period_seconds=0
        ),
    )
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            core.read_namespaced_pod("py-dry-pod", ns)
        except ApiException as e:
            expect(e.status == 404, f"404 once deleted, got {e.status}")
            return
        expect(time.monotonic() < deadline, "the pod was deleted")
        time.sleep(0.05)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    kubeconfig, ns = sys.argv[1], sys.argv[2]
    config.load_kube_config(config_file=kubeconfig)
    batch, core = client.BatchV1Api(), client.CoreV1Api()
    checks = [
        ("create, get, list and watch (watch=True) of Jobs and Pods", lambda: check_create_get_list_watch(batch, core, ns)),
        ("an invalid Job is a 422 with causes", lambda: check_invalid_job_is_422_with_causes(batch, ns)),
        ("dryRun creates and deletes nothing", lambda: check_dry_run(batch, core, ns)),
        ("delete honours preconditions", lambda: check_delete_preconditions(core, ns)),
    ]
    for name, check in checks:
        try:
            check()
        except (CheckFailed, ApiException, AssertionError) as e:
            print(f"FAIL {name}: {e}")
            return 1
        print(f"ok {name}")
    print(f"all {len(checks)} checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
