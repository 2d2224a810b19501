# shellcheck shell=bash
# The values deploy/render.sh fills into the ${VAR} placeholders of deploy/k8s/*.yaml and
# deploy/eks/cluster.yaml. Edit them here, or override any of them from the environment:
#   AWS_ACCOUNT_ID=123456789012 PROFILE=p5 deploy/render.sh deploy/k8s/common.yaml deploy/k8s/jobset.yaml
#   AWS_ACCOUNT_ID=123456789012 PROFILE=g6 NNODES=4 deploy/render.sh ...
# PROFILE picks the instance type and the values that follow from it (GPUs, EFA, CPUs, memory,
# huge pages, GPUDirect RDMA, the transport to require); every one of them is still a line of
# its own below, and a value set in the environment wins over the profile's.
#   p4d  p4d.24xlarge: 8 x A100 40 GB, 96 vCPUs, 1152 GiB, 4 EFA with GPUDirect RDMA (the default)
#   p5   p5.48xlarge: 8 x H100 80 GB, 192 vCPUs, 2048 GiB, 32 EFA with GPUDirect RDMA
#   g6   g6.12xlarge: 4 x L4 24 GB, 48 vCPUs, 192 GiB; run here without EFA (pod traffic over
#        the ENA interface, TCP: NCCL's socket transport) and without GPUDirect RDMA. EC2 lists
#        EFA for g6.8xlarge and larger, one interface: EFA_PER_NODE=1 turns it on (docs/deploy.md)
# The defaults are the reference shape: 2 nodes x 4 GPUs on p4d.24xlarge in us-east-1.
# Sourced by render.sh (bash); each line keeps a value that is already set.

# --- the instance profile -------------------------------------------------------------------------
: "${PROFILE:=p4d}"                 # p4d | p5 | g6
case $PROFILE in
  p4d)
    : "${INSTANCE_TYPE:=p4d.24xlarge}"
    : "${GPUS_PER_NODE:=4}"         # workers per pod; 4 of the node's 8 GPUs
    : "${EFA_PER_NODE:=4}"          # p4d.24xlarge has 4 EFA interfaces
    : "${CPUS_PER_NODE:=44}"        # of 96 vCPUs: 4 of the 8 GPUs get about half
    : "${MEMORY_PER_NODE:=500Gi}"   # of 1152 GiB
    : "${SHM_SIZE:=64Gi}"
    : "${HUGEPAGES_2MI:=5120Mi}"    # libfabric's EFA buffers
    : "${FI_EFA_USE_DEVICE_RDMA:=1}"  # GPUDirect RDMA over EFA: p4d has it
    ;;
  p5)
    : "${INSTANCE_TYPE:=p5.48xlarge}"
    : "${GPUS_PER_NODE:=8}"
    : "${EFA_PER_NODE:=32}"
    : "${CPUS_PER_NODE:=184}"       # of 192 vCPUs
    : "${MEMORY_PER_NODE:=1800Gi}"  # of 2048 GiB
    : "${SHM_SIZE:=64Gi}"
    : "${HUGEPAGES_2MI:=5120Mi}"
    : "${FI_EFA_USE_DEVICE_RDMA:=1}"  # GPUDirect RDMA over EFA: p5 has it
    ;;
  g6)
    : "${INSTANCE_TYPE:=g6.12xlarge}"
    : "${GPUS_PER_NODE:=4}"         # all 4 L4s (24 GB each)
    : "${EFA_PER_NODE:=0}"          # EFA off: nothing requested, efaEnabled false, no transport=efa
    : "${CPUS_PER_NODE:=44}"        # of 48 vCPUs: the rest for the kubelet and the DaemonSets
    : "${MEMORY_PER_NODE:=160Gi}"   # of 192 GiB, less what the node reserves
    : "${SHM_SIZE:=32Gi}"           # counts against MEMORY_PER_NODE
    : "${HUGEPAGES_2MI:=0}"         # only EFA's libfabric wants them
    : "${FI_EFA_USE_DEVICE_RDMA:=0}"  # no GPUDirect RDMA: 0 overrides the image's default of 1
    ;;
  *)
    echo "deploy/env.sh: PROFILE='$PROFILE' is not one of p4d, p5, g6" >&2
    return 1
    ;;
esac
# Derived from EFA_PER_NODE unless set: with EFA, the GPU node group is efaEnabled and training
# refuses any other transport (dist.require_transport, kiln doctor --require transport=efa);
# without it, neither (an empty REQUIRE_TRANSPORT drops those lines from the manifests).
if [[ $EFA_PER_NODE =~ ^[0-9]+$ && $EFA_PER_NODE -gt 0 ]]; then
  : "${EFA_ENABLED:=true}"
  : "${REQUIRE_TRANSPORT=efa}"
else
  : "${EFA_ENABLED:=false}"
  : "${REQUIRE_TRANSPORT=}"
fi

# --- AWS and the cluster --------------------------------------------------------------------------
: "${AWS_REGION:=us-east-1}"
: "${AWS_ACCOUNT_ID:=}"             # required (aws sts get-caller-identity --query Account)
: "${EKS_CLUSTER:=kiln}"
: "${EKS_VERSION:=1.33}"
# The GPU node group sits in one availability zone (EFA requires it), the one holding your capacity:
#   aws ec2 describe-instance-type-offerings --location-type availability-zone \
#     --filters Name=instance-type,Values=p4d.24xlarge --region us-east-1
: "${AWS_AZ:=${AWS_REGION}a}"       # the GPU node group's zone
: "${AWS_AZ_2:=${AWS_REGION}b}"     # a second zone: the EKS control plane needs two

# --- the job's shape ----------------------------------------------------------------------------
: "${NNODES:=2}"                    # pods, one per node
# From the profile above: GPUS_PER_NODE (workers per pod, dist.nproc_per_node, one GPU each),
# EFA_PER_NODE (EFA interfaces per pod; 0 requests none), CPUS_PER_NODE, MEMORY_PER_NODE,
# SHM_SIZE (/dev/shm, memory-backed, per pod), HUGEPAGES_2MI (libfabric's EFA buffers; the node
# must have them allocated; 0 requests none).
: "${MAX_RESTARTS:=3}"              # whole-group restarts before the job is failed
# Kueue (https://kueue.sigs.k8s.io): the LocalQueue the JobSet and the TrainJob are submitted
# to. Set, the manifests carry the kueue.x-k8s.io/queue-name label and start suspended, and
# Kueue unsuspends them when it admits them; empty (the default), neither.
: "${KUEUE_QUEUE:=}"
#   SUSPEND  spec.suspend of the JobSet and the TrainJob: true when KUEUE_QUEUE is set
if [[ -n $KUEUE_QUEUE ]]; then
  : "${SUSPEND:=true}"
else
  : "${SUSPEND:=false}"
fi
# Derived unless set (left empty when an input is not a whole number; render.sh names it):
#   THREADS_PER_WORKER  dist.threads_per_worker: the pod's CPUs, not the node's, per worker
#   BACKOFF_LIMIT       pod failures an indexed Job / PyTorchJob tolerates: restarts x nodes
#   WORKER_REPLICAS     PyTorchJob Worker replicas: the Master is node 0
if [[ $CPUS_PER_NODE =~ ^[0-9]+$ && $GPUS_PER_NODE =~ ^[1-9][0-9]*$ ]]; then
  : "${THREADS_PER_WORKER:=$((CPUS_PER_NODE / GPUS_PER_NODE))}"
fi
if [[ $MAX_RESTARTS =~ ^[0-9]+$ && $NNODES =~ ^[1-9][0-9]*$ ]]; then
  : "${BACKOFF_LIMIT:=$((MAX_RESTARTS * NNODES))}"
  : "${WORKER_REPLICAS:=$((NNODES - 1))}"
fi
: "${SIGTERM_GRACE_S:=25}"          # failure.sigterm_grace_s: time to checkpoint after SIGTERM
#   TERMINATION_GRACE_S  the pods' terminationGracePeriodSeconds: SIGTERM_GRACE_S + 5
if [[ $SIGTERM_GRACE_S =~ ^[1-9][0-9]*$ ]]; then
  : "${TERMINATION_GRACE_S:=$((SIGTERM_GRACE_S + 5))}"
fi
: "${MASTER_PORT:=29500}"           # kiln's rendezvous store on node 0
: "${SOCKET_IFNAME:=eth0}"          # the pod network's interface (Gloo and NCCL's bootstrap)

# --- image, namespace, storage --------------------------------------------------------------------
if [[ -z ${IMAGE_REPOSITORY:-} && -n ${AWS_ACCOUNT_ID} ]]; then
  IMAGE_REPOSITORY=${AWS_ACCOUNT_ID}.dkr.ecr.${AWS_REGION}.amazonaws.com/kiln
fi
: "${IMAGE_REPOSITORY:=}"           # required: set AWS_ACCOUNT_ID, or this
: "${IMAGE_TAG:=0.1.0}"             # push a new tag per build; never rely on :latest
: "${NAMESPACE:=kiln}"
: "${JOB_NAME:=kiln-qwen}"          # also the DNS subdomain of the pods: lower case, digits, '-'
: "${STORAGE_CLASS:=fsx-lustre}"    # a ReadWriteMany class: FSx for Lustre (see docs/deploy.md)
: "${STORAGE_SIZE:=1200Gi}"         # FSx for Lustre's smallest SSD file system
: "${DATA_PVC:=kiln-data}"          # shared by every job: models, data and run directories

# --- the recipe (deploy/k8s/common.yaml), paths on the shared volume mounted at /data ----------
: "${MODEL_DIR:=models/Qwen2.5-7B}"
: "${TRAIN_DATA:=datasets/train.jsonl}"
: "${SEQ_LEN:=2048}"
: "${MAX_STEPS:=1000}"
: "${CHECKPOINT_EVERY:=200}"        # checkpoint.every_steps: what a restarted pod resumes from
