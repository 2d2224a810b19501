#!/usr/bin/env python3
"""Renders deploy/k8s/*.yaml and deploy/eks/cluster.yaml with deploy/render.sh, parses every
document and checks the fields kiln relies on: kinds and API versions, the container's image,
command and arguments, GPU and EFA resources (requests = limits = the shape), the environment
kiln's launcher reads (KILN_NNODES / MASTER_ADDR / MASTER_PORT, or the operator's PET_*), the
memory-backed /dev/shm, the recipe and data volumes, the headless Service, the restart and
failure policies, and the recipe's keys against kiln's own list. Also checks that render.sh
refuses unfilled or invalid placeholders. Two shapes: the reference (2 x 4 GPUs on p4d) and a
p5 one, so nothing is hard-coded.

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
RECIPE_CC = ROOT / "src" / "kiln" / "train" / "recipe.cc"

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}" + (f": {detail}" if detail else ""))
    return ok


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
SHAPES = {
    "reference": {"NNODES": "2", "GPUS_PER_NODE": "4", "EFA_PER_NODE": "4",
                  "INSTANCE_TYPE": "p4d.24xlarge", "CPUS_PER_NODE": "44"},
    "p5": {"NNODES": "4", "GPUS_PER_NODE": "8", "EFA_PER_NODE": "32",
           "INSTANCE_TYPE": "p5.48xlarge", "CPUS_PER_NODE": "184", "MEMORY_PER_NODE": "1800Gi",
           "SIGTERM_GRACE_S": "100"},
}


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
    """kiln's list of valid recipe keys, from the recipe parser's source."""
    text = RECIPE_CC.read_text()
    return set(re.findall(r'^\s*"([a-z_]+\.[a-z_]+)",\s*$', text, re.M))


def by_kind(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


def check_pod(label, pod, values, container_name, expect_env, forbid_env=()):
    """The checks every variant's pod template must pass."""
    spec = pod["spec"]
    gpus, efa = int(values["GPUS_PER_NODE"]), int(values["EFA_PER_NODE"])
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
    check_eq(f"{label}: nvidia.com/gpu", req.get("nvidia.com/gpu"), gpus)
    check_eq(f"{label}: vpc.amazonaws.com/efa", req.get("vpc.amazonaws.com/efa"), efa)
    for r in ("hugepages-2Mi", "cpu", "memory"):
        check(f"{label}: {r} requested", r in req, f"requests {req}")

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
    check(f"{label}: kiln's recipe key list found in {RECIPE_CC.relative_to(ROOT)}",
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
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_DEBUG": None,
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
        "FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_DEBUG": None,
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
            "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_DEBUG": None,
        }, forbid_env=("PET_NNODES", "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR",
                       "PET_MASTER_PORT", "MASTER_ADDR", "MASTER_PORT", "KILN_NNODES"))


def check_doctor(docs, values, label):
    pods = by_kind(docs, "Pod")
    if not check(f"{label}: one Pod", len(pods) == 1):
        return
    spec = pods[0]["spec"]
    check_eq(f"{label}: restartPolicy", spec.get("restartPolicy"), "Never")
    c = spec["containers"][0]
    check_eq(f"{label}: command is the image's entrypoint", c.get("command"), ["kiln-entrypoint"])
    check_eq(f"{label}: args", c.get("args"),
             ["kiln", "doctor", "--require", "transport=efa", "--require",
              f"gpus={values['GPUS_PER_NODE']}"])
    res = c.get("resources", {})
    check_eq(f"{label}: resources requests == limits", res.get("requests"), res.get("limits"))
    check_eq(f"{label}: GPUs and EFA of a job pod",
             (res.get("limits", {}).get("nvidia.com/gpu"), res.get("limits", {}).get("vpc.amazonaws.com/efa")),
             (int(values["GPUS_PER_NODE"]), int(values["EFA_PER_NODE"])))
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
    check_eq(f"{label}: GPU group efaEnabled", g.get("efaEnabled"), True)
    check_eq(f"{label}: GPU group desiredCapacity", g.get("desiredCapacity"), int(values["NNODES"]))
    check_eq(f"{label}: GPU group in one availability zone", len(g.get("availabilityZones", [])), 1)


def main():
    templates = sorted(p.name for p in K8S.glob("*.yaml"))
    check_eq("deploy/k8s holds the common file, three variants and the doctor pod", templates,
             ["common.yaml", "doctor.yaml", "indexed-job.yaml", "jobset.yaml", "pytorchjob.yaml"])

    for shape, extra in SHAPES.items():
        values = {**BASE, **extra, "MEMORY_PER_NODE": extra.get("MEMORY_PER_NODE", "500Gi")}
        common = load([K8S / "common.yaml"], values, f"{shape} common")
        check_common(common, values, f"{shape} common")
        check_namespaces(common, values, f"{shape} common")
        for variant, fn in (("jobset", check_jobset), ("indexed-job", check_indexed_job),
                            ("pytorchjob", check_pytorchjob)):
            docs = load([K8S / f"{variant}.yaml"], values, f"{shape} {variant}")
            check_namespaces(docs, values, f"{shape} {variant}")
            fn(docs, values, f"{shape} {variant}")
        doctor = load([K8S / "doctor.yaml"], values, f"{shape} doctor")
        check_namespaces(doctor, values, f"{shape} doctor")
        check_doctor(doctor, values, f"{shape} doctor")
        check_cluster(load([CLUSTER], values, f"{shape} eks"), values, f"{shape} eks")

    # Rendering several templates at once gives one stream with every document.
    both = load([K8S / "common.yaml", K8S / "jobset.yaml"], {**BASE, **SHAPES["reference"]},
                "common+jobset")
    check_eq("common+jobset: kinds in order", [d["kind"] for d in both],
             ["ConfigMap", "PersistentVolumeClaim", "JobSet"])

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

    # Refusals: nothing on stdout, exit 1, the culprit named.
    p = render([K8S / "jobset.yaml"], {})
    check("refuses: no AWS_ACCOUNT_ID nor IMAGE_REPOSITORY",
          p.returncode == 1 and p.stdout == "" and "IMAGE_REPOSITORY" in p.stderr,
          f"rc {p.returncode}, stderr {p.stderr.strip()!r}")
    p = render([K8S / "jobset.yaml"], {**BASE, "NNODES": "two"})
    check("refuses: NNODES not a number",
          p.returncode == 1 and p.stdout == "" and "NNODES='two'" in p.stderr, p.stderr.strip())
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

    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
