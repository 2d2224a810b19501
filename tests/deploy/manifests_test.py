#!/usr/bin/env python3
"""Renders deploy/k8s/*.yaml and deploy/eks/cluster.yaml with deploy/render.sh, parses every
document and checks the fields kiln relies on: kinds and API versions, the container's image,
command and arguments, GPU and EFA resources (requests = limits = the shape), the environment
kiln's launcher reads (KILN_NNODES / MASTER_ADDR / MASTER_PORT, or the operator's PET_*), the
memory-backed /dev/shm, the recipe and data volumes, the headless Service, the restart and
failure policies, and the recipe's keys against kiln's own list. Also checks that render.sh
refuses unfilled or invalid placeholders. Three shapes: the reference (2 x 4 GPUs on p4d, every
value given), and env.sh's p5 and g6 profiles (PROFILE=..., the rest from the profile), so
nothing is hard-coded: with EFA (p4d, p5) the pods request EFA devices, set GPUDirect RDMA and
require transport efa; without it (g6: g6.12xlarge, 4 x L4) they request none, set
FI_EFA_USE_DEVICE_RDMA=0 and require nothing. Also: the recipe resumes (train.resume auto) and
checkpoints, the JobSet and the TrainJob carry Kueue's queue label and start suspended when a
queue is set, and the Kubeflow Trainer v2 TrainJob (with its TrainingRuntime) gives the pods what
the other variants give them. And the stream a user applies (common.yaml with one variant)
holds the job's NetworkPolicy: it selects that variant's pods, and only this job's, admits
ingress from exactly those pods on every port, and leaves egress alone.

Standard library plus PyYAML (Debian's python3-yaml, installed by scripts/setup.sh). Prints
"N passed, M failed"; exits non-zero when anything failed.
"""

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RENDER = ROOT / "deploy" / "render.sh"
K8S = ROOT / "deploy" / "k8s"
CLUSTER = ROOT / "deploy" / "eks" / "cluster.yaml"
RECIPE_SCHEMA = ROOT / "src" / "kiln" / "train" / "recipe_schema.cc"

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "common"))
from checks import Checks  # noqa: E402  (tests/common, shared by the Python tests)

CHECKS = Checks()
check = CHECKS.check


def check_eq(name, actual, expected):
    return check(name, actual == expected, f"expected {expected!r}, got {actual!r}")


BASE = {
    "AWS_ACCOUNT_ID": "123456789012",
    "AWS_REGION": "us-west-2",
    "NAMESPACE": "kiln-test",
    "JOB_NAME": "qwen-ft",
    "IMAGE_TAG": "test-1",
    "STORAGE_CLASS": "fsx-test",
    "DATA_PVC": "shared-data",
    "SHM_SIZE": "32Gi",
    "MASTER_PORT": "29500",
    "SOCKET_IFNAME": "eth0",
    "MAX_RESTARTS": "3",
}
# Per shape: what the environment sets ("env"), and what the manifests must then hold
# ("expect": env plus what the profile in deploy/env.sh derives).
SHAPES = {
    "reference": {
        "env": {"NNODES": "2", "GPUS_PER_NODE": "4", "EFA_PER_NODE": "4",
                "INSTANCE_TYPE": "p4d.24xlarge", "CPUS_PER_NODE": "44", "MEMORY_PER_NODE": "500Gi"},
        "expect": {"HUGEPAGES_2MI": "5120Mi", "FI_EFA_USE_DEVICE_RDMA": "1",
                   "REQUIRE_TRANSPORT": "efa"},
    },
    "p5": {
        "env": {"PROFILE": "p5", "NNODES": "4", "SIGTERM_GRACE_S": "100"},
        "expect": {"INSTANCE_TYPE": "p5.48xlarge", "GPUS_PER_NODE": "8", "EFA_PER_NODE": "32",
                   "CPUS_PER_NODE": "184", "MEMORY_PER_NODE": "1800Gi", "HUGEPAGES_2MI": "5120Mi",
                   "FI_EFA_USE_DEVICE_RDMA": "1", "REQUIRE_TRANSPORT": "efa"},
    },
    "g6": {
        "env": {"PROFILE": "g6", "NNODES": "3"},
        "expect": {"INSTANCE_TYPE": "g6.12xlarge", "GPUS_PER_NODE": "4", "EFA_PER_NODE": "0",
                   "CPUS_PER_NODE": "44", "MEMORY_PER_NODE": "160Gi", "HUGEPAGES_2MI": "0",
                   "FI_EFA_USE_DEVICE_RDMA": "0", "REQUIRE_TRANSPORT": ""},
    },
}


def has_efa(values):
    return int(values["EFA_PER_NODE"]) > 0


def render(files, values, extra_args=()):
    """Runs render.sh in a clean environment holding only `values`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
    env.update(values)
    return subprocess.run(["bash", str(RENDER), *extra_args, *map(str, files)], env=env,
                          capture_output=True, text=True, cwd=ROOT)


def load(files, values, label):
    p = render(files, values)
    if not check(f"{label}: render.sh succeeds", p.returncode == 0, p.stderr.strip()):
        return []
    check(f"{label}: no placeholder left", "${" not in p.stdout)
    try:
        docs = [d for d in yaml.safe_load_all(p.stdout) if d is not None]
    except yaml.YAMLError as e:
        check(f"{label}: output parses as YAML", False, str(e))
        return []
    check(f"{label}: output parses as YAML ({len(docs)} documents)", len(docs) > 0)
    return docs


def recipe_keys():
    """kiln's list of valid recipe keys, from the recipe's schema (one row per key, starting
    `kind("section.key", kRun` or `{"section.key", kNotRun`)."""
    text = RECIPE_SCHEMA.read_text()
    return set(re.findall(r'^\s*(?:[a-z_]+\(|\{)"([a-z_]+\.[a-z_]+)", k(?:Not)?Run\b', text, re.M))


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_resources(label, req, values):
    """GPUs always; EFA devices and huge pages only where the profile has them (a request for
    a resource the node does not advertise keeps the pod Pending)."""
    gpus, efa = int(values["GPUS_PER_NODE"]), int(values["EFA_PER_NODE"])
    check_eq(f"{label}: nvidia.com/gpu", req.get("nvidia.com/gpu"), gpus)
    if efa:
        check_eq(f"{label}: vpc.amazonaws.com/efa", req.get("vpc.amazonaws.com/efa"), efa)
    else:
        check(f"{label}: no EFA device requested (profile without EFA)",
              "vpc.amazonaws.com/efa" not in req, f"requests {req}")
    if values["HUGEPAGES_2MI"] != "0":
        check_eq(f"{label}: hugepages-2Mi", req.get("hugepages-2Mi"), values["HUGEPAGES_2MI"])
    else:
        check(f"{label}: no huge pages requested", "hugepages-2Mi" not in req, f"requests {req}")
    check_eq(f"{label}: cpu", req.get("cpu"), int(values["CPUS_PER_NODE"]))
    check_eq(f"{label}: memory", req.get("memory"), values["MEMORY_PER_NODE"])


def check_pod(label, pod, values, container_name, expect_env, forbid_env=()):
    """The checks every variant's pod template must pass."""
    spec = pod["spec"]
    gpus = int(values["GPUS_PER_NODE"])
    containers = [c for c in spec.get("containers", []) if c.get("name") == container_name]
    if not check(f"{label}: one container named {container_name}", len(containers) == 1):
        return
    c = containers[0]
    image = (f"{values['AWS_ACCOUNT_ID']}.dkr.ecr.{values['AWS_REGION']}.amazonaws.com/kiln:"
             f"{values['IMAGE_TAG']}")
    check_eq(f"{label}: image", c.get("image"), image)
    check_eq(f"{label}: command is the image's entrypoint", c.get("command"), ["kiln-entrypoint"])
    check_eq(f"{label}: args", c.get("args"),
             ["kiln", "train", "/config/recipe.yaml", f"dist.nproc_per_node={gpus}"])
    ports = [p.get("containerPort") for p in c.get("ports", [])]
    check(f"{label}: container port {values['MASTER_PORT']}", int(values["MASTER_PORT"]) in ports,
          f"ports {ports}")

    res = c.get("resources", {})
    req, lim = res.get("requests", {}), res.get("limits", {})
    check_eq(f"{label}: resources requests == limits", req, lim)
    check_resources(label, req, values)

    envs = env_map(c)
    names = [e["name"] for e in c.get("env", [])]
    check(f"{label}: env names unique", len(names) == len(set(names)), f"{names}")
    bad = [e["name"] for e in c.get("env", [])
           if not ("valueFrom" in e or isinstance(e.get("value"), str))]
    check(f"{label}: every env value is a string or valueFrom", not bad, f"not strings: {bad}")
    for name, value in expect_env.items():
        if not check(f"{label}: env {name} present", name in envs, f"env {sorted(envs)}"):
            continue
        if value is not None:
            check_eq(f"{label}: env {name}", envs[name].get("value"), value)
    for name in forbid_env:
        check(f"{label}: env {name} left to the operator", name not in envs)
    # The store listens beyond loopback: kiln refuses to start it without the operator's secret,
    # and a job id (guessable) must not stand in for it.
    token = envs.get("KILN_STORE_TOKEN", {}).get("valueFrom", {}).get("secretKeyRef", {})
    check_eq(f"{label}: KILN_STORE_TOKEN from the Secret", token,
             {"name": f"{values['JOB_NAME']}-store-token", "key": "token"})
    check(f"{label}: no job id as the store's token", "KILN_JOB_ID" not in envs, f"{sorted(envs)}")
    # SIGTERM: kiln checkpoints within failure.sigterm_grace_s; Kubernetes must wait longer.
    grace = spec.get("terminationGracePeriodSeconds")
    check(f"{label}: terminationGracePeriodSeconds ({grace}) >= failure.sigterm_grace_s + 5 "
          f"({values.get('SIGTERM_GRACE_S', 25)})",
          isinstance(grace, int) and grace >= int(values.get("SIGTERM_GRACE_S", 25)) + 5, f"{grace}")

    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    shm = volumes.get(mounts.get("/dev/shm", {}).get("name"), {})
    check_eq(f"{label}: /dev/shm is a memory-backed emptyDir",
             shm.get("emptyDir", {}).get("medium"), "Memory")
    check_eq(f"{label}: /dev/shm sizeLimit", shm.get("emptyDir", {}).get("sizeLimit"),
             values["SHM_SIZE"])
    recipe = volumes.get(mounts.get("/config", {}).get("name"), {})
    check_eq(f"{label}: /config is the recipe ConfigMap", recipe.get("configMap", {}).get("name"),
             f"{values['JOB_NAME']}-recipe")
    check(f"{label}: /config read-only", mounts.get("/config", {}).get("readOnly") is True)
    data = volumes.get(mounts.get("/data", {}).get("name"), {})
    check_eq(f"{label}: /data is the shared claim",
             data.get("persistentVolumeClaim", {}).get("claimName"), values["DATA_PVC"])

    check_eq(f"{label}: nodeSelector instance type",
             spec.get("nodeSelector", {}).get("node.kubernetes.io/instance-type"),
             values["INSTANCE_TYPE"])
    tolerated = [t.get("key") for t in spec.get("tolerations", [])]
    check(f"{label}: tolerates nvidia.com/gpu", "nvidia.com/gpu" in tolerated)
    anti = (spec.get("affinity", {}).get("podAntiAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", []))
    labels = pod.get("metadata", {}).get("labels", {})
    one_per_node = any(
        t.get("topologyKey") == "kubernetes.io/hostname"
        and t.get("labelSelector", {}).get("matchLabels")
        and t["labelSelector"]["matchLabels"].items() <= labels.items()
        for t in anti)
    check(f"{label}: one pod per node (anti-affinity on its own labels)", one_per_node,
          f"{anti} vs labels {labels}")


def check_common(docs, values, label):
    cms = by_kind(docs, "ConfigMap")
    pvcs = by_kind(docs, "PersistentVolumeClaim")
    if not check(f"{label}: one ConfigMap and one PVC", len(cms) == 1 and len(pvcs) == 1):
        return
    cm, pvc = cms[0], pvcs[0]
    check_eq(f"{label}: ConfigMap name", cm["metadata"]["name"], f"{values['JOB_NAME']}-recipe")
    try:
        recipe = yaml.safe_load(cm["data"]["recipe.yaml"])
    except (KeyError, yaml.YAMLError) as e:
        check(f"{label}: recipe.yaml parses", False, str(e))
        return
    flat = {f"{s}.{k}": v for s, m in recipe.items() for k, v in (m or {}).items()}
    known = recipe_keys()
    check(f"{label}: kiln's recipe key list found in {RECIPE_SCHEMA.relative_to(ROOT)}",
          len(known) >= 20, f"found {len(known)}")
    unknown = sorted(set(flat) - known)
    check(f"{label}: every recipe key is one kiln knows", not unknown, f"unknown: {unknown}")
    for key in ("model.path", "data.train", "output.dir"):
        check(f"{label}: recipe {key} absolute under /data",
              str(flat.get(key, "")).startswith("/data/"), f"{flat.get(key)!r}")
    check_eq(f"{label}: recipe output.dir", flat.get("output.dir"),
             f"/data/runs/{values['JOB_NAME']}")
    gpus = int(values["GPUS_PER_NODE"])
    check_eq(f"{label}: recipe dist.nproc_per_node", flat.get("dist.nproc_per_node"), gpus)
    check_eq(f"{label}: recipe dist.threads_per_worker", flat.get("dist.threads_per_worker"),
             int(values["CPUS_PER_NODE"]) // gpus)
    check_eq(f"{label}: recipe failure.sigterm_grace_s", flat.get("failure.sigterm_grace_s"),
             int(values.get("SIGTERM_GRACE_S", 25)))
    # A pod restarted by Kubernetes runs this recipe again into the same output.dir: it must
    # resume (kiln refuses resume=none over existing checkpoints), and checkpoints must exist.
    check_eq(f"{label}: recipe train.resume auto (a restarted pod continues)",
             flat.get("train.resume"), "auto")
    every = flat.get("checkpoint.every_steps")
    check(f"{label}: recipe checkpoint.every_steps on ({every})",
          isinstance(every, int) and every > 0, f"{every!r}")
    check(f"{label}: recipe does not overwrite earlier checkpoints",
          flat.get("output.overwrite") in (None, False), f"{flat.get('output.overwrite')!r}")
    if has_efa(values):
        check_eq(f"{label}: recipe dist.require_transport efa", flat.get("dist.require_transport"),
                 "efa")
    else:
        check(f"{label}: recipe requires no transport (no EFA)",
              flat.get("dist.require_transport") in (None, ""),
              f"{flat.get('dist.require_transport')!r}")
    check_eq(f"{label}: PVC name", pvc["metadata"]["name"], values["DATA_PVC"])
    check_eq(f"{label}: PVC ReadWriteMany", pvc["spec"].get("accessModes"), ["ReadWriteMany"])
    check_eq(f"{label}: PVC storage class", pvc["spec"].get("storageClassName"),
             values["STORAGE_CLASS"])


def check_namespaces(docs, values, label):
    for d in docs:
        check(f"{label}: {d.get('kind')} has apiVersion, kind, name",
              bool(d.get("apiVersion") and d.get("kind") and d.get("metadata", {}).get("name")))
        check_eq(f"{label}: {d.get('kind')} namespace", d.get("metadata", {}).get("namespace"),
                 values["NAMESPACE"])


def check_kueue(label, obj, values):
    """Kueue's queue label, and spec.suspend true exactly when a queue is set (Kueue admits the
    job by unsuspending it; without Kueue a suspended job would never start)."""
    queue = values.get("KUEUE_QUEUE", "")
    labels = obj.get("metadata", {}).get("labels", {})
    if queue:
        check_eq(f"{label}: Kueue queue label", labels.get("kueue.x-k8s.io/queue-name"), queue)
        check_eq(f"{label}: spec.suspend (Kueue admits it)", obj["spec"].get("suspend"), True)
    else:
        check(f"{label}: no Kueue queue label without a queue",
              "kueue.x-k8s.io/queue-name" not in labels, f"{labels}")
        check_eq(f"{label}: spec.suspend false without a queue", obj["spec"].get("suspend"), False)


def check_jobset(docs, values, label):
    sets = by_kind(docs, "JobSet")
    if not check(f"{label}: one JobSet", len(sets) == 1):
        return
    js = sets[0]
    job, nnodes = values["JOB_NAME"], int(values["NNODES"])
    check_eq(f"{label}: apiVersion", js["apiVersion"], "jobset.x-k8s.io/v1alpha2")
    net = js["spec"].get("network", {})
    check_eq(f"{label}: network.enableDNSHostnames", net.get("enableDNSHostnames"), True)
    check_eq(f"{label}: network.subdomain (the headless Service)", net.get("subdomain"), job)
    check_eq(f"{label}: failurePolicy.maxRestarts",
             js["spec"].get("failurePolicy", {}).get("maxRestarts"), int(values["MAX_RESTARTS"]))
    check_kueue(label, js, values)
    rjs = js["spec"].get("replicatedJobs", [])
    if not check(f"{label}: one replicated job", len(rjs) == 1):
        return
    rj = rjs[0]
    check_eq(f"{label}: replicas", rj.get("replicas"), 1)
    jspec = rj["template"]["spec"]
    check_eq(f"{label}: completionMode", jspec.get("completionMode"), "Indexed")
    check_eq(f"{label}: parallelism", jspec.get("parallelism"), nnodes)
    check_eq(f"{label}: completions", jspec.get("completions"), nnodes)
    check_eq(f"{label}: backoffLimit 0 (JobSet restarts the group)", jspec.get("backoffLimit"), 0)
    pod = jspec["template"]
    check_eq(f"{label}: restartPolicy", pod["spec"].get("restartPolicy"), "Never")
    # JobSet names pods <jobset>-<replicatedJob>-<job index>-<pod index>, under the subdomain.
    master = f"{job}-{rj['name']}-0-0.{net.get('subdomain')}"
    check_pod(f"{label} pod", pod, values, "kiln", {
        "KILN_NNODES": str(nnodes), "MASTER_ADDR": master,
        "MASTER_PORT": values["MASTER_PORT"], "KILN_STORE_TOKEN": None,
        "KILN_SOCKET_IFNAME": values["SOCKET_IFNAME"], "NCCL_SOCKET_IFNAME": values["SOCKET_IFNAME"],
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": values["FI_EFA_USE_DEVICE_RDMA"],
        "NCCL_DEBUG": None,
    })


def check_indexed_job(docs, values, label):
    svcs, jobs = by_kind(docs, "Service"), by_kind(docs, "Job")
    if not check(f"{label}: one Service and one Job", len(svcs) == 1 and len(jobs) == 1):
        return
    svc, job = svcs[0], jobs[0]
    name, nnodes = values["JOB_NAME"], int(values["NNODES"])
    check_eq(f"{label}: Service clusterIP None (headless)", svc["spec"].get("clusterIP"), "None")
    check_eq(f"{label}: Service publishNotReadyAddresses", svc["spec"].get("publishNotReadyAddresses"),
             True)
    ports = [p.get("port") for p in svc["spec"].get("ports", [])]
    check(f"{label}: Service port {values['MASTER_PORT']}", int(values["MASTER_PORT"]) in ports,
          f"{ports}")
    check_eq(f"{label}: Job apiVersion", job["apiVersion"], "batch/v1")
    spec = job["spec"]
    check_eq(f"{label}: completionMode", spec.get("completionMode"), "Indexed")
    check_eq(f"{label}: parallelism", spec.get("parallelism"), nnodes)
    check_eq(f"{label}: completions", spec.get("completions"), nnodes)
    check_eq(f"{label}: backoffLimit = restarts x nodes", spec.get("backoffLimit"),
             int(values["MAX_RESTARTS"]) * nnodes)
    pod = spec["template"]
    labels = pod.get("metadata", {}).get("labels", {})
    selector = svc["spec"].get("selector", {})
    check(f"{label}: Service selects the Job's pods", bool(selector) and selector.items() <= labels.items(),
          f"selector {selector} vs labels {labels}")
    check_eq(f"{label}: pod subdomain is the Service", pod["spec"].get("subdomain"),
             svc["metadata"]["name"])
    check(f"{label}: restartPolicy set", pod["spec"].get("restartPolicy") in ("Never", "OnFailure"))
    # An indexed Job's pods are named <job>-<index>; under `subdomain` they resolve as
    # <job>-<index>.<service>.
    check_pod(f"{label} pod", pod, values, "kiln", {
        "KILN_NNODES": str(nnodes), "MASTER_ADDR": f"{name}-0.{svc['metadata']['name']}",
        "MASTER_PORT": values["MASTER_PORT"], "KILN_STORE_TOKEN": None,
        "KILN_SOCKET_IFNAME": values["SOCKET_IFNAME"], "NCCL_SOCKET_IFNAME": values["SOCKET_IFNAME"],
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": values["FI_EFA_USE_DEVICE_RDMA"],
        "NCCL_DEBUG": None,
    }, forbid_env=("JOB_COMPLETION_INDEX",))


def check_pytorchjob(docs, values, label):
    jobs = by_kind(docs, "PyTorchJob")
    if not check(f"{label}: one PyTorchJob", len(jobs) == 1):
        return
    pj = jobs[0]
    nnodes = int(values["NNODES"])
    check_eq(f"{label}: apiVersion", pj["apiVersion"], "kubeflow.org/v1")
    spec = pj["spec"]
    check_eq(f"{label}: nprocPerNode (a string in kubeflow.org/v1)", spec.get("nprocPerNode"),
             values["GPUS_PER_NODE"])
    check_eq(f"{label}: runPolicy.backoffLimit", spec.get("runPolicy", {}).get("backoffLimit"),
             int(values["MAX_RESTARTS"]) * nnodes)
    replicas = spec.get("pytorchReplicaSpecs", {})
    check_eq(f"{label}: replica types", sorted(replicas), ["Master", "Worker"])
    check_eq(f"{label}: Master replicas", replicas.get("Master", {}).get("replicas"), 1)
    check_eq(f"{label}: Worker replicas", replicas.get("Worker", {}).get("replicas"), nnodes - 1)
    for rtype, r in replicas.items():
        check(f"{label}: {rtype} restartPolicy set", r.get("restartPolicy") in ("OnFailure", "ExitCode", "Never"))
        pod = r["template"]
        c = [c for c in pod["spec"].get("containers", []) if c.get("name") == "pytorch"]
        port = [p for p in (c[0].get("ports", []) if c else []) if p.get("name") == "pytorchjob-port"]
        check(f"{label}: {rtype} port pytorchjob-port = {values['MASTER_PORT']}",
              len(port) == 1 and port[0].get("containerPort") == int(values["MASTER_PORT"]), f"{port}")
        # The operator sets the PET_* variables kiln reads, and MASTER_ADDR/MASTER_PORT: a
        # manifest value would fight it.
        check_pod(f"{label} {rtype} pod", pod, values, "pytorch", {
            "KILN_STORE_TOKEN": None, "KILN_SOCKET_IFNAME": values["SOCKET_IFNAME"],
            "NCCL_SOCKET_IFNAME": values["SOCKET_IFNAME"], "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": values["FI_EFA_USE_DEVICE_RDMA"], "NCCL_DEBUG": None,
        }, forbid_env=("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR",
                       "PET_MASTER_PORT", "MASTER_ADDR", "MASTER_PORT", "KILN_NNODES"))


TRAINER_API = "trainer.kubeflow.org/v1alpha1"
# Set by Kubeflow Trainer's Torch policy on the `node` container; a TrainJob must not set them.
PET_ENV = ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
           "PET_MASTER_PORT")
TRAINER_PORT = 29500  # Trainer's fixed PET_MASTER_PORT and the container port it adds


def check_trainjob(docs, values, label):
    """The TrainJob and its TrainingRuntime; then the pod Trainer builds from them (the
    runtime's pod template with the TrainJob's image, command, args and resources on the
    container named `node`, plus the port Trainer adds) passes the checks every variant's pod
    passes."""
    runtimes, jobs = by_kind(docs, "TrainingRuntime"), by_kind(docs, "TrainJob")
    if not check(f"{label}: one TrainingRuntime and one TrainJob",
                 len(runtimes) == 1 and len(jobs) == 1):
        return
    rt, tj = runtimes[0], jobs[0]
    nnodes, gpus = int(values["NNODES"]), int(values["GPUS_PER_NODE"])
    check_eq(f"{label}: TrainJob apiVersion", tj.get("apiVersion"), TRAINER_API)
    check_eq(f"{label}: TrainingRuntime apiVersion", rt.get("apiVersion"), TRAINER_API)
    check_eq(f"{label}: TrainJob name", tj["metadata"]["name"], values["JOB_NAME"])
    spec = tj.get("spec", {})
    check_eq(f"{label}: runtimeRef names the TrainingRuntime", spec.get("runtimeRef"),
             {"apiGroup": "trainer.kubeflow.org", "kind": "TrainingRuntime",
              "name": rt["metadata"]["name"]})
    check_eq(f"{label}: runtime in the TrainJob's namespace", rt["metadata"].get("namespace"),
             tj["metadata"].get("namespace"))
    check_kueue(label, tj, values)
    tr = spec.get("trainer", {})
    image = (f"{values['AWS_ACCOUNT_ID']}.dkr.ecr.{values['AWS_REGION']}.amazonaws.com/kiln:"
             f"{values['IMAGE_TAG']}")
    check_eq(f"{label}: trainer.image", tr.get("image"), image)
    check_eq(f"{label}: trainer.command", tr.get("command"), ["kiln-entrypoint"])
    check_eq(f"{label}: trainer.args (the kiln command)", tr.get("args"),
             ["kiln", "train", "/config/recipe.yaml", f"dist.nproc_per_node={gpus}"])
    check_eq(f"{label}: trainer.numNodes", tr.get("numNodes"), nnodes)
    check_eq(f"{label}: trainer.numProcPerNode (GPUs per node)", tr.get("numProcPerNode"), gpus)
    check(f"{label}: trainer.env sets none of Trainer's reserved PET_* names",
          not {e.get("name") for e in tr.get("env", [])} & set(PET_ENV), f"{tr.get('env')}")
    res = tr.get("resourcesPerNode", {})
    check_eq(f"{label}: resourcesPerNode requests == limits", res.get("requests"), res.get("limits"))
    check_resources(f"{label} resourcesPerNode", res.get("requests", {}), values)
    allowed = {"runtimeRef", "initializer", "trainer", "suspend", "managedBy",
               "podTemplateOverrides", "activeDeadlineSeconds"}
    check(f"{label}: only TrainJob spec fields of trainer.kubeflow.org/v1alpha1",
          set(spec) <= allowed, f"{sorted(set(spec) - allowed)}")
    check(f"{label}: only Trainer fields of v1alpha1",
          set(tr) <= {"image", "command", "args", "env", "numNodes", "resourcesPerNode",
                      "numProcPerNode"}, f"{sorted(tr)}")

    ml = rt.get("spec", {}).get("mlPolicy", {})
    check_eq(f"{label}: runtime mlPolicy.numNodes", ml.get("numNodes"), nnodes)
    check_eq(f"{label}: runtime mlPolicy.torch.numProcPerNode",
             ml.get("torch", {}).get("numProcPerNode"), gpus)
    js = rt.get("spec", {}).get("template", {}).get("spec", {})
    check_eq(f"{label}: runtime failurePolicy.maxRestarts",
             js.get("failurePolicy", {}).get("maxRestarts"), int(values["MAX_RESTARTS"]))
    rjs = [r for r in js.get("replicatedJobs", []) if r.get("name") == "node"]
    if not check(f"{label}: runtime has the replicated job `node`", len(rjs) == 1):
        return
    rj = rjs[0]
    check_eq(f"{label}: `node` is the trainer step",
             rj["template"].get("metadata", {}).get("labels", {})
             .get("trainer.kubeflow.org/trainjob-ancestor-step"), "trainer")
    jspec = rj["template"]["spec"]
    check_eq(f"{label}: backoffLimit 0 (the JobSet restarts the group)", jspec.get("backoffLimit"), 0)
    pod = jspec["template"]
    check_eq(f"{label}: restartPolicy", pod["spec"].get("restartPolicy"), "Never")
    nodes = [c for c in pod["spec"].get("containers", []) if c.get("name") == "node"]
    if not check(f"{label}: runtime container named `node` (Trainer's trainer container)",
                 len(nodes) == 1):
        return
    # What Trainer does: the TrainJob's trainer fields onto the `node` container, and its port.
    built = yaml.safe_load(yaml.safe_dump(pod))
    c = [c for c in built["spec"]["containers"] if c["name"] == "node"][0]
    check(f"{label}: runtime container sets no PET_* (Trainer does)",
          not {e["name"] for e in c.get("env", [])} & set(PET_ENV))
    c.update({"image": tr.get("image"), "command": tr.get("command"), "args": tr.get("args"),
              "resources": tr.get("resourcesPerNode", {})})
    c.setdefault("ports", []).append({"containerPort": TRAINER_PORT})
    check_pod(f"{label} pod", built, {**values, "MASTER_PORT": str(TRAINER_PORT)}, "node", {
        "KILN_STORE_TOKEN": None, "KILN_SOCKET_IFNAME": values["SOCKET_IFNAME"],
        "NCCL_SOCKET_IFNAME": values["SOCKET_IFNAME"], "FI_PROVIDER": "efa",
        "FI_EFA_USE_DEVICE_RDMA": values["FI_EFA_USE_DEVICE_RDMA"], "NCCL_DEBUG": None,
    }, forbid_env=PET_ENV + ("MASTER_ADDR", "MASTER_PORT", "KILN_NNODES"))


def check_doctor(docs, values, label):
    pods = by_kind(docs, "Pod")
    if not check(f"{label}: one Pod", len(pods) == 1):
        return
    spec = pods[0]["spec"]
    check_eq(f"{label}: restartPolicy", spec.get("restartPolicy"), "Never")
    c = spec["containers"][0]
    check_eq(f"{label}: command is the image's entrypoint", c.get("command"), ["kiln-entrypoint"])
    require = ["--require", "transport=efa"] if has_efa(values) else []
    check_eq(f"{label}: args (transport=efa only with EFA)", c.get("args"),
             ["kiln", "doctor", *require, "--require", f"gpus={values['GPUS_PER_NODE']}"])
    res = c.get("resources", {})
    check_eq(f"{label}: resources requests == limits", res.get("requests"), res.get("limits"))
    check_resources(label, res.get("limits", {}), values)
    check_eq(f"{label}: env FI_EFA_USE_DEVICE_RDMA", env_map(c).get("FI_EFA_USE_DEVICE_RDMA", {}).get("value"),
             values["FI_EFA_USE_DEVICE_RDMA"])
    envs = env_map(c)
    check_eq(f"{label}: env FI_PROVIDER", envs.get("FI_PROVIDER", {}).get("value"), "efa")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
    shm = volumes.get(mounts.get("/dev/shm", {}).get("name"), {})
    check_eq(f"{label}: /dev/shm is a memory-backed emptyDir",
             shm.get("emptyDir", {}).get("medium"), "Memory")
    check_eq(f"{label}: nodeSelector instance type",
             spec.get("nodeSelector", {}).get("node.kubernetes.io/instance-type"),
             values["INSTANCE_TYPE"])


def pod_templates(docs):
    """(where, pod template) for every pod template a workload in `docs` carries: what the
    controllers (JobSet, Job, the training operator, Trainer) make the job's pods from."""
    out = []
    for d in docs:
        kind, spec = d.get("kind"), d.get("spec", {})
        if kind == "JobSet":
            for rj in spec.get("replicatedJobs", []):
                out.append((f"JobSet {rj.get('name')}", rj["template"]["spec"]["template"]))
        elif kind == "Job":
            out.append(("Job", spec["template"]))
        elif kind == "PyTorchJob":
            for rtype, r in spec.get("pytorchReplicaSpecs", {}).items():
                out.append((f"PyTorchJob {rtype}", r["template"]))
        elif kind == "TrainingRuntime":
            for rj in spec.get("template", {}).get("spec", {}).get("replicatedJobs", []):
                out.append((f"TrainingRuntime {rj.get('name')}", rj["template"]["spec"]["template"]))
        elif kind == "Pod":
            out.append(("Pod", d))
    return out


def selects(selector, labels):
    """Kubernetes' LabelSelector semantics (matchLabels and matchExpressions); an empty
    selector selects every pod."""
    if not all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, vals = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {"In": key in labels and labels[key] in vals,
              "NotIn": key not in labels or labels[key] not in vals,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op)
        if not ok:
            return False
    return True


def check_network_policy(docs, values, label):
    """The stream a user applies (common.yaml and one variant) holds the job's NetworkPolicy:
    it selects every pod template of the variant, and only this job's pods (not all of the
    namespace, nor another job's), and admits ingress from exactly those pods, on every port
    (Gloo's pairs listen on ephemeral ports); egress is not restricted."""
    pols = by_kind(docs, "NetworkPolicy")
    if not check(f"{label}: one NetworkPolicy", len(pols) == 1, f"{len(pols)}"):
        return
    pol = pols[0]
    check_eq(f"{label}: NetworkPolicy apiVersion", pol.get("apiVersion"), "networking.k8s.io/v1")
    spec = pol.get("spec", {})
    check_eq(f"{label}: NetworkPolicy policyTypes [Ingress] (egress left open)",
             spec.get("policyTypes"), ["Ingress"])
    check(f"{label}: NetworkPolicy has no egress rules", "egress" not in spec, f"{spec.get('egress')}")
    sel = spec.get("podSelector")
    check(f"{label}: NetworkPolicy podSelector is not empty (empty selects the whole namespace)",
          isinstance(sel, dict) and bool(sel.get("matchLabels") or sel.get("matchExpressions")),
          f"{sel!r}")
    sel = sel if isinstance(sel, dict) else {}
    templates = pod_templates(docs)
    check(f"{label}: the variant has pod templates", bool(templates))
    for where, pod in templates:
        labels = pod.get("metadata", {}).get("labels") or {}
        check(f"{label}: NetworkPolicy podSelector selects the {where} pods",
              selects(sel, labels), f"selector {sel} vs labels {labels}")
        other = {**labels, "app.kubernetes.io/instance": values["JOB_NAME"] + "-other"}
        check(f"{label}: NetworkPolicy podSelector does not select another job's {where} pods",
              not selects(sel, other), f"selector {sel} vs labels {other}")
    ingress = spec.get("ingress")
    if not check(f"{label}: NetworkPolicy has one ingress rule",
                 isinstance(ingress, list) and len(ingress) == 1, f"{ingress!r}"):
        return
    rule = ingress[0]
    check(f"{label}: ingress rule on every port (no `ports`)", "ports" not in rule, f"{rule}")
    check_eq(f"{label}: ingress admits exactly the pods the policy selects (same namespace)",
             rule.get("from"), [{"podSelector": sel}])


def check_cluster(docs, values, label):
    if not check(f"{label}: one ClusterConfig", len(docs) == 1 and docs[0].get("kind") == "ClusterConfig"):
        return
    cc = docs[0]
    check_eq(f"{label}: apiVersion", cc.get("apiVersion"), "eksctl.io/v1alpha5")
    check_eq(f"{label}: region", cc["metadata"].get("region"), values["AWS_REGION"])
    gpu = [g for g in cc.get("managedNodeGroups", []) if g.get("instanceType") == values["INSTANCE_TYPE"]]
    if not check(f"{label}: one {values['INSTANCE_TYPE']} node group", len(gpu) == 1):
        return
    g = gpu[0]
    check_eq(f"{label}: GPU group efaEnabled (only with EFA)", g.get("efaEnabled"), has_efa(values))
    check_eq(f"{label}: GPU group desiredCapacity", g.get("desiredCapacity"), int(values["NNODES"]))
    check_eq(f"{label}: GPU group in one availability zone", len(g.get("availabilityZones", [])), 1)


def main():
    templates = sorted(p.name for p in K8S.glob("*.yaml"))
    check_eq("deploy/k8s holds the common file, four variants and the doctor pod", templates,
             ["common.yaml", "doctor.yaml", "indexed-job.yaml", "jobset.yaml", "pytorchjob.yaml",
              "trainjob.yaml"])

    variants = (("jobset", check_jobset), ("indexed-job", check_indexed_job),
                ("pytorchjob", check_pytorchjob), ("trainjob", check_trainjob))
    for shape, spec in SHAPES.items():
        env = {**BASE, **spec["env"]}
        values = {**env, **spec["expect"]}
        common = load([K8S / "common.yaml"], env, f"{shape} common")
        check_common(common, values, f"{shape} common")
        check_namespaces(common, values, f"{shape} common")
        for variant, fn in variants:
            docs = load([K8S / f"{variant}.yaml"], env, f"{shape} {variant}")
            check_namespaces(docs, values, f"{shape} {variant}")
            fn(docs, values, f"{shape} {variant}")
            # What a user applies: common.yaml with the variant, one stream; the variant's
            # pods must be the ones common.yaml's NetworkPolicy isolates.
            stream = load([K8S / "common.yaml", K8S / f"{variant}.yaml"], env,
                          f"{shape} common+{variant}")
            check_network_policy(stream, values, f"{shape} common+{variant}")
        doctor = load([K8S / "doctor.yaml"], env, f"{shape} doctor")
        check_namespaces(doctor, values, f"{shape} doctor")
        check_doctor(doctor, values, f"{shape} doctor")
        # The doctor pod is no job pod: the job's policy does not select it (nor does the job's
        # one-pod-per-node anti-affinity count it), and its one network check is a Gloo group
        # of two ranks inside the pod.
        pols = by_kind(common, "NetworkPolicy")
        if pols:
            sel = pols[0].get("spec", {}).get("podSelector") or {}
            for where, pod in pod_templates(doctor):
                check(f"{shape} doctor: the job's NetworkPolicy does not select the doctor {where}",
                      not selects(sel, pod.get("metadata", {}).get("labels") or {}))
        check_cluster(load([CLUSTER], env, f"{shape} eks"), values, f"{shape} eks")

    # Kueue: a queue set in env.sh (or the environment) labels the JobSet and the TrainJob and
    # suspends them until Kueue admits them.
    for shape in ("reference", "g6"):
        env = {**BASE, **SHAPES[shape]["env"], "KUEUE_QUEUE": "team-a"}
        values = {**env, **SHAPES[shape]["expect"]}
        check_jobset(load([K8S / "jobset.yaml"], env, f"{shape} kueue jobset"), values,
                     f"{shape} kueue jobset")
        check_trainjob(load([K8S / "trainjob.yaml"], env, f"{shape} kueue trainjob"), values,
                       f"{shape} kueue trainjob")

    # Rendering several templates at once gives one stream with every document.
    both = load([K8S / "common.yaml", K8S / "jobset.yaml"], {**BASE, **SHAPES["reference"]["env"]},
                "common+jobset")
    check_eq("common+jobset: kinds in order", [d["kind"] for d in both],
             ["ConfigMap", "PersistentVolumeClaim", "NetworkPolicy", "JobSet"])

    # env.sh's defaults fill every placeholder once the account is known.
    all_templates = [K8S / t for t in templates] + [CLUSTER]
    p = render(all_templates, {"AWS_ACCOUNT_ID": "123456789012"})
    check("defaults: every template renders from env.sh with only AWS_ACCOUNT_ID set",
          p.returncode == 0, p.stderr.strip())
    if p.returncode == 0:
        js = [d for d in yaml.safe_load_all(p.stdout) if d and d["kind"] == "JobSet"][0]
        res = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["resources"]
        check_eq("defaults: the reference shape (4 GPUs, 4 EFA per pod)",
                 (res["limits"]["nvidia.com/gpu"], res["limits"]["vpc.amazonaws.com/efa"]), (4, 4))
        check_eq("defaults: 2 nodes", js["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"], 2)
        check_eq("defaults: p4d.24xlarge", js["spec"]["replicatedJobs"][0]["template"]["spec"]
                 ["template"]["spec"]["nodeSelector"]["node.kubernetes.io/instance-type"],
                 "p4d.24xlarge")
    p = render(all_templates, {"AWS_ACCOUNT_ID": "123456789012", "PROFILE": "g6"})
    check("defaults: every template renders with PROFILE=g6", p.returncode == 0, p.stderr.strip())
    if p.returncode == 0:
        out = p.stdout
        check("PROFILE=g6: no EFA device anywhere", "vpc.amazonaws.com/efa" not in out)
        docs = [d for d in yaml.safe_load_all(out) if d]
        recipe = yaml.safe_load(by_kind(docs, "ConfigMap")[0]["data"]["recipe.yaml"])
        doctor = by_kind(docs, "Pod")[0]["spec"]["containers"][0]["args"]
        check("PROFILE=g6: nothing requires transport=efa (recipe, doctor)",
              "require_transport" not in recipe.get("dist", {}) and "transport=efa" not in doctor,
              f"{recipe.get('dist')} {doctor}")
        efa_enabled = [g.get("efaEnabled") for d in by_kind(docs, "ClusterConfig")
                       for g in d.get("managedNodeGroups", []) if "efaEnabled" in g]
        check_eq("PROFILE=g6: the GPU node group is not efaEnabled", efa_enabled, [False])
        check("PROFILE=g6: g6.12xlarge nodes", "instance-type: g6.12xlarge" in out
              and "instanceType: g6.12xlarge" in out)
    # Each profile value is still overridable from the environment.
    p = render([K8S / "jobset.yaml"], {"AWS_ACCOUNT_ID": "123456789012", "PROFILE": "g6",
                                       "EFA_PER_NODE": "1"})
    check("PROFILE=g6 EFA_PER_NODE=1: the override wins (one EFA device requested)",
          p.returncode == 0 and "vpc.amazonaws.com/efa: 1" in p.stdout, p.stderr.strip())
    p = render([K8S / "jobset.yaml"], {"AWS_ACCOUNT_ID": "123456789012", "PROFILE": "p4d",
                                       "FI_EFA_USE_DEVICE_RDMA": "0"})
    check("PROFILE=p4d FI_EFA_USE_DEVICE_RDMA=0: the override wins",
          p.returncode == 0 and 'value: "0"' in p.stdout, p.stderr.strip())

    # Refusals: nothing on stdout, exit 1, the culprit named.
    p = render([K8S / "jobset.yaml"], {})
    check("refuses: no AWS_ACCOUNT_ID nor IMAGE_REPOSITORY",
          p.returncode == 1 and p.stdout == "" and "IMAGE_REPOSITORY" in p.stderr,
          f"rc {p.returncode}, stderr {p.stderr.strip()!r}")
    p = render([K8S / "jobset.yaml"], {**BASE, "NNODES": "two"})
    check("refuses: NNODES not a number",
          p.returncode == 1 and p.stdout == "" and "NNODES='two'" in p.stderr, p.stderr.strip())
    p = render([K8S / "jobset.yaml"], {**BASE, "PROFILE": "g7"})
    check("refuses: an unknown PROFILE",
          p.returncode == 1 and p.stdout == "" and "PROFILE='g7'" in p.stderr, p.stderr.strip())
    p = render([K8S / "jobset.yaml"], {**BASE, "SUSPEND": "yes"})
    check("refuses: SUSPEND not true or false",
          p.returncode == 1 and p.stdout == "" and "SUSPEND='yes'" in p.stderr, p.stderr.strip())
    p = render([K8S / "indexed-job.yaml"], {**BASE, "GPUS_PER_NODE": "0"})
    check("refuses: GPUS_PER_NODE 0",
          p.returncode == 1 and p.stdout == "" and "GPUS_PER_NODE='0'" in p.stderr, p.stderr.strip())
    with tempfile.TemporaryDirectory() as tmp:
        bad = Path(tmp) / "bad.yaml"
        bad.write_text("a: ${NOT_DEFINED_ANYWHERE}\nb: ${lower_case}\nc: ${JOB_NAME}\n")
        p = render([bad], BASE)
        check("refuses: a placeholder env.sh does not define",
              p.returncode == 1 and p.stdout == "" and "NOT_DEFINED_ANYWHERE" in p.stderr
              and "${lower_case}" in p.stderr, p.stderr.strip())
        cond = Path(tmp) / "cond.yaml"
        cond.write_text("a: ${JOB_NAME}\nb: ${OPT_A}  # render:if OPT_A\n"
                        "c: ${UNSET_ANYWHERE}  # render:if UNSET_ANYWHERE\nd: 1  # render:if OPT_0\n")
        p = render([cond], {**BASE, "OPT_A": "x", "OPT_0": "0"})
        check("render:if keeps a line whose variable is set (without the marker), drops it when "
              "empty, unset or 0, placeholders and all",
              p.returncode == 0 and p.stdout.endswith("a: qwen-ft\nb: x\n"), 
              f"rc {p.returncode} {p.stdout!r} {p.stderr.strip()!r}")
        envf = Path(tmp) / "other-env.sh"
        envf.write_text(': "${JOB_NAME:=from-env-file}"\n')
        ok = Path(tmp) / "ok.yaml"
        ok.write_text("name: ${JOB_NAME}\n")
        p = render([ok], {}, extra_args=("-e", str(envf)))
        check("-e ENV_FILE: values come from that file",
              p.returncode == 0 and "name: from-env-file" in p.stdout, p.stderr.strip())
        p = render([ok], {"JOB_NAME": "from-environment"}, extra_args=("-e", str(envf)))
        check("the environment wins over the env file",
              p.returncode == 0 and "name: from-environment" in p.stdout, p.stderr.strip())

    return CHECKS.summary()


if __name__ == "__main__":
    sys.exit(main())
