#!/usr/bin/env bash
# Fills the ${VAR} placeholders of deploy templates from deploy/env.sh (or the environment) and
# prints the manifests on stdout, one YAML stream:
#   deploy/render.sh deploy/k8s/common.yaml deploy/k8s/jobset.yaml | kubectl apply -f -
#   deploy/render.sh -e my-env.sh deploy/eks/cluster.yaml > cluster.yaml
# It refuses (exit 1, nothing on stdout) when a placeholder has no value, when a value that must
# be a whole number is not one, or when anything that looks like a placeholder is left over.
# Only ${NAME} with NAME in upper case is a placeholder; pure bash, no envsubst needed.
# A template line ending in the comment `# render:if NAME` is kept (without that comment) only
# when NAME is set and neither empty nor 0; otherwise it is dropped, placeholders and all. That
# is how a profile without EFA requests no EFA devices and a job without a Kueue queue carries
# no queue label.
set -euo pipefail

usage() {
  echo "usage: deploy/render.sh [-e ENV_FILE] TEMPLATE..." >&2
  echo "  ENV_FILE defaults to deploy/env.sh; variables already set in the environment win." >&2
  exit 2
}

here=$(cd "$(dirname "$0")" && pwd)
env_file=$here/env.sh
while getopts "e:h" opt; do
  case $opt in
    e) env_file=$OPTARG ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
(($# > 0)) || usage

die() {
  echo "render: $*" >&2
  exit 1
}

[[ -r $env_file ]] || die "cannot read $env_file"
# shellcheck source=SCRIPTDIR/env.sh
source "$env_file"

# Placeholders that end up as counts, ports or sizes in the manifests: whole numbers only, and
# some of them at least 1.
integers=" NNODES GPUS_PER_NODE EFA_PER_NODE CPUS_PER_NODE MAX_RESTARTS BACKOFF_LIMIT
  WORKER_REPLICAS MASTER_PORT THREADS_PER_WORKER SEQ_LEN MAX_STEPS SIGTERM_GRACE_S
  TERMINATION_GRACE_S CHECKPOINT_EVERY FI_EFA_USE_DEVICE_RDMA "
positive=" NNODES GPUS_PER_NODE CPUS_PER_NODE MASTER_PORT THREADS_PER_WORKER SEQ_LEN MAX_STEPS
  SIGTERM_GRACE_S TERMINATION_GRACE_S CHECKPOINT_EVERY "
# Placeholders that must be one of a few words.
booleans=" SUSPEND EFA_ENABLED "

output=""
problems=()
for template in "$@"; do
  [[ -r $template ]] || die "cannot read $template"
  content=""
  conditional='^(.*[^[:space:]])[[:space:]]+#[[:space:]]*render:if[[:space:]]+([A-Z_][A-Z0-9_]*)[[:space:]]*$'
  while IFS= read -r line || [[ -n $line ]]; do
    if [[ $line =~ $conditional ]]; then
      cond=${BASH_REMATCH[2]}
      cond_value=${!cond:-}
      [[ -z $cond_value || $cond_value == 0 ]] && continue
      line=${BASH_REMATCH[1]}
    fi
    content+=$line$'\n'
  done <"$template"
  content=${content%$'\n'}
  # shellcheck disable=SC2016  # a literal ${ to search for
  mapfile -t names < <(grep -o '\${[A-Z_][A-Z0-9_]*}' <<<"$content" | sort -u | sed 's/^\${\(.*\)}$/\1/')
  reported=" "
  for name in "${names[@]}"; do
    value=${!name:-}
    if [[ -z $value ]]; then
      problems+=("$template: \${$name} has no value (set $name in $env_file or the environment)")
      reported+="\${$name} "
      continue
    fi
    if [[ $positive == *" $name "* && ! $value =~ ^[1-9][0-9]*$ ]]; then
      problems+=("$template: $name='$value' is not a whole number >= 1")
      reported+="\${$name} "
      continue
    fi
    if [[ $integers == *" $name "* && ! $value =~ ^[0-9]+$ ]]; then
      problems+=("$template: $name='$value' is not a whole number")
      reported+="\${$name} "
      continue
    fi
    if [[ $booleans == *" $name "* && $value != true && $value != false ]]; then
      problems+=("$template: $name='$value' is not true or false")
      reported+="\${$name} "
      continue
    fi
    if [[ $value == *$'\n'* ]]; then
      problems+=("$template: $name spans several lines")
      reported+="\${$name} "
      continue
    fi
    content=${content//"\${$name}"/"$value"}
  done
  # Anything placeholder-like still there (${lower}, ${A:-b}, $(...)): a template mistake.
  # shellcheck disable=SC2016  # literal ${ and $( to search for
  while IFS= read -r left; do
    [[ -n $left && $reported != *" $left "* ]] && problems+=("$template: unfilled placeholder $left")
  done < <(grep -o '\${[^}]*}\|\$([^)]*)' <<<"$content" | sort -u || true)
  output+="---"$'\n'"# rendered from ${template#"$PWD"/} by deploy/render.sh"$'\n'"$content"$'\n'
done

if ((${#problems[@]})); then
  printf 'render: %s\n' "${problems[@]}" >&2
  echo "render: refusing to print manifests with unfilled or invalid values" >&2
  exit 1
fi
printf '%s' "$output"
