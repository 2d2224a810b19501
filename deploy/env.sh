# shellcheck shell=bash
# The values deploy/render.sh fills into the ${VAR} placeholders of deploy/k8s/*.yaml and
# deploy/eks/cluster.yaml. Edit them here, or override any of them from the environment:
#   AWS_ACCOUNT_ID=123456789012 INSTANCE_TYPE=p5.48xlarge GPUS_PER_NODE=8 EFA_PER_NODE=32 \
#     deploy/render.sh deploy/k8s/common.yaml deploy/k8s/jobset.yaml
# The defaults are the reference shape: 2 nodes x 4 GPUs on p4d.24xlarge in us-east-1.
# Sourced by render.sh (bash); each line keeps a value that is already set.

# --- AWS and the cluster --------------------------------------------------------------------------
: "${AWS_REGION:=us-east-1}"
: "${AWS_ACCOUNT_ID:=}"             # required (aws sts get-caller-identity --query Account)
: "${EKS_CLUSTER:=kiln}"
: "${EKS_VERSION:=1.33}"
# EFA node groups must sit in one availability zone, the one holding your p4d/p5 capacity:
#   aws ec2 describe-instance-type-offerings --location-type availability-zone \
#     --filters Name=instance-type,Values=p4d.24xlarge --region us-east-1
: "${AWS_AZ:=${AWS_REGION}a}"       # the GPU node group's zone
: "${AWS_AZ_2:=${AWS_REGION}b}"     # a second zone: the EKS control plane needs two
: "${INSTANCE_TYPE:=p4d.24xlarge}"  # p4d.24xlarge (8 x A100 40 GB, 4 EFA) or p5.48xlarge (8 x H100, 32 EFA)

# --- the job's shape ----------------------------------------------------------------------------
: "${NNODES:=2}"                    # pods, one per node
: "${GPUS_PER_NODE:=4}"             # workers per pod (dist.nproc_per_node), one GPU each
: "${EFA_PER_NODE:=4}"              # EFA interfaces per pod: 4 on p4d.24xlarge, up to 32 on p5.48xlarge
: "${CPUS_PER_NODE:=44}"            # p4d.24xlarge has 96 vCPUs; 4 of its 8 GPUs get about half
: "${MEMORY_PER_NODE:=500Gi}"       # p4d.24xlarge has 1152 GiB
: "${SHM_SIZE:=64Gi}"               # /dev/shm (memory-backed) per pod
: "${HUGEPAGES_2MI:=5120Mi}"        # libfabric's EFA buffers; the node must have them allocated (0 to skip)
: "${MAX_RESTARTS:=3}"              # whole-group restarts before the job is failed
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
