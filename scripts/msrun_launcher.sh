#!/usr/bin/env bash
# Launch a command on N workers with MindSpore's msrun, with MindFormers' positional forms:
#
#   bash scripts/msrun_launcher.sh "<command>"                       # 8 workers on this machine
#   bash scripts/msrun_launcher.sh "<command>" WORKER_NUM            # WORKER_NUM workers on this machine
#   bash scripts/msrun_launcher.sh "<command>" WORKER_NUM MASTER_PORT LOG_DIR JOIN CLUSTER_TIME_OUT
#   bash scripts/msrun_launcher.sh "<command>" WORKER_NUM LOCAL_WORKER MASTER_ADDR MASTER_PORT NODE_RANK \
#                                  LOG_DIR JOIN CLUSTER_TIME_OUT     # several machines
#
# Example (2 data-parallel workers on CPU; each worker's log is output/msrun/worker_<rank>.log):
#   bash scripts/msrun_launcher.sh "run_mindformer_memopt.py --config configs/swap_case3_op_swap.yaml \
#       --run_mode train --use_parallel True" 2
#
# Workers run `python` from PATH: the active virtual environment, else the repository's .venv.
# Unlike MindFormers' script, JOIN defaults to True so that the command returns when training ends.
set -euo pipefail

WORKER_NUM=8
LOCAL_WORKER=8
MASTER_ADDR="127.0.0.1"
MASTER_PORT=8118
NODE_RANK=0
LOG_DIR="output/msrun"
JOIN="True"
CLUSTER_TIME_OUT=600

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 1
}

case $# in
  1) ;;
  2) WORKER_NUM=$2; LOCAL_WORKER=$2 ;;
  6) WORKER_NUM=$2; LOCAL_WORKER=$2; MASTER_PORT=$3; LOG_DIR=$4; JOIN=$5; CLUSTER_TIME_OUT=$6 ;;
  9) WORKER_NUM=$2; LOCAL_WORKER=$3; MASTER_ADDR=$4; MASTER_PORT=$5; NODE_RANK=$6; LOG_DIR=$7; JOIN=$8
     CLUSTER_TIME_OUT=$9 ;;
  *) usage ;;
esac

for value in "$WORKER_NUM" "$LOCAL_WORKER" "$MASTER_PORT" "$NODE_RANK" "$CLUSTER_TIME_OUT"; do
  if [[ ! $value =~ ^[0-9]+$ ]]; then
    echo "error: '$value' is not a number" >&2
    usage
  fi
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x "$ROOT/.venv/bin/python" ]; then
  export PATH="$ROOT/.venv/bin:$PATH"
fi
if ! command -v msrun >/dev/null 2>&1; then
  echo "error: msrun not found; install the environment first: bash scripts/setup_env.sh" >&2
  exit 1
fi

# The command is one string, as in MindFormers' script: split it into words here.
read -r -a COMMAND <<< "$1"
# mf_memopt's launcher checks the YAML, its device and pipeline parallelism on it once, here, so that a run that
# cannot start (a pipeline config on CPU, a device this MindSpore cannot load) stops in one line before msrun
# starts workers or writes logs.
if [[ ${COMMAND[0]} == *run_mindformer_memopt.py ]]; then
  python "${COMMAND[@]}" --preflight || exit 1
fi

mkdir -p "$LOG_DIR"
MSRUN=(msrun --worker_num="$WORKER_NUM" --local_worker_num="$LOCAL_WORKER" --master_port="$MASTER_PORT"
       --log_dir="$LOG_DIR" --join="$JOIN" --cluster_time_out="$CLUSTER_TIME_OUT")
if [ "$WORKER_NUM" != "$LOCAL_WORKER" ]; then
  MSRUN+=(--master_addr="$MASTER_ADDR" --node_rank="$NODE_RANK")
  echo "worker_num=$WORKER_NUM, local_worker=$LOCAL_WORKER: run this script on the other nodes with their node_rank"
fi

echo "Running: ${MSRUN[*]} $1"
echo "Worker logs: $LOG_DIR/worker_<rank>.log"
exec "${MSRUN[@]}" "${COMMAND[@]}"
