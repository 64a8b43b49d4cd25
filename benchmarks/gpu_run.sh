#!/usr/bin/env bash
# On a GPU machine: the efficiency benchmark, one call per dtype (docs/efficiency.md, "On a GPU"),
# the ListOps paper-setting column (docs/accelerators.md, "ListOps on one GPU"), the side by side
# with the authors, and the queue of every pending GPU job (`queue`, 5. below: run this one).
#
# 1. Wheels a GPU image with jax + CUDA, flax, optax, orbax and chex lacks: on a machine with PyPI
#    access, from the repository root, once (fills the git-ignored .whl/, ~11 MB):
#        bash benchmarks/gpu_run.sh download
# 2. On the GPU machine, with .whl/ copied beside the repository, one call per dtype, each under
#    ten minutes:
#        bash benchmarks/gpu_run.sh float32
#        bash benchmarks/gpu_run.sh bfloat16
#    It installs the wheels into /tmp/site, records nvidia-smi and jax.devices(), checks that
#    cuDNN flash attention equals XLA attention (bf16, padding, causal; benchmarks/check_cudnn.py)
#    and runs benchmarks/efficiency.py (batch 32, one subprocess per point for peak device
#    memory) for softmax explicit / xla / cudnn (bf16 only: cuDNN needs bf16/fp16) and the
#    paper mixers. Results: $OUT/<dtype>/efficiency.{json,md,png} and the logs.
# 3. The ListOps column at the paper setting (configs/lra_listops.py:<family>, seed 0, every
#    family), resumable in calls of at most ten minutes:
#        bash benchmarks/gpu_run.sh listops
#    Each call unpacks the run directories of the last call (the listops_*.tar files in
#    $LISTOPS_STATE, default .gpu_state/), generates the data once, trains the unfinished
#    families side by side on the one GPU (at most $LISTOPS_PARALLEL at once, default all)
#    until $LISTOPS_BUDGET_S seconds (default 480) are spent (SIGTERM: each run saves a
#    checkpoint and stops), evaluates each finished run's best checkpoint on 2 000 held-out trees
#    (seed 1; DIR/heldout.json; LISTOPS_HELDOUT=0 skips it), and packs the run directories (metrics, eval JSON, train.log, the
#    best checkpoint, and the resume checkpoints of unfinished runs; no data, no tensorboard)
#    into $OUT/listops_<k>.tar files of at most 15 MiB -- the device tool returns at most 8
#    files of 16 MiB: copy them to .gpu_state/ for the next call -- with $OUT/listops.md, the
#    column so far. A family is finished when its DIR/eval/test.json exists (the
#    best-on-validation checkpoint's test accuracy). $LISTOPS_FAMILIES (config words per family,
#    e.g. "transformer ponet,reference adamra_eq8,reference"; default: transformer linear ponet
#    adamra contextpool) and $LISTOPS_SIZE (default full) change what runs, $LISTOPS_ARGS adds
#    train.py flags; LISTOPS_INSTALL=0 uses the python at hand (the CPU test,
#    tests/test_gpu_run.py).
#    A family with the word `spt` (e.g. "ponet,spt") self-pretrains first: configs/lra_listops.py:
#    ponet,spt in DIR/pretrain (masked tokens of the training trees, data/masking.py) until it
#    finishes, then ponet fine-tuned from its best checkpoint in DIR (init_from, a new head);
#    `spt_causal` (e.g. "transformer,spt_causal") the same by next tokens (causal mixers);
#    $LISTOPS_PRETRAIN_ARGS / $LISTOPS_FINETUNE_ARGS add flags to one stage (e.g.
#    --config.num_train_steps=2500 to each: the scratch runs' 5 000 steps in all).
#    Positions and Amos et al.'s recipe are words too (config/lra.py): "transformer,rotary" from
#    scratch, "transformer,rotary,spt,amos" pre-trains with their schedule (constant lr 1e-3 after
#    2 000 warm-up steps, no dropout, 100 epochs: --config.num_train_epochs=N in
#    $LISTOPS_PRETRAIN_ARGS to shorten) and fine-tunes with `finetune,amos` (lr 1e-4), which
#    refuses a pre-training still at its data's unigram rate (in DIR/train.log; add
#    --config.init_from_refuse_unlearned=False to $LISTOPS_FINETUNE_ARGS to go on); `6x512` is
#    their model (6 layers, width 512, 8 heads, FF 2048), e.g. "transformer,rotary,6x512".
# 4. Side by side with the authors' PyTorch, then the sweep with FLOP/s, in one call of at most
#    $PEER_BUDGET_S seconds (default 200) -- installs, process starts and compiles included:
#        bash benchmarks/gpu_run.sh peer
#    (device tool: carry [".official", ".whl"]). In priority order, each stage given what is left:
#    a. benchmarks/official_torch.py --device cuda: their LRA text step (lxchtan/PoNet
#       examples/LRA/code from $PEER_OFFICIAL_DIR, default .official/ponet_lra_code, as
#       run_tasks.py runs it: amp fp16 + GradScaler, batch 32 x 4096) under $PEER_TORCH_PYTHON
#       (default: the same python; torch is the image's) against ours in bf16 and float32
#       (softmax: xla and cudnn), one process at a time, $PEER_ROUNDS rounds (default 2) of
#       $PEER_STEPS timed steps (10) after $PEER_WARMUP (3), peak device memory per process.
#       Without their code or torch it says so in one line and times our side alone.
#    b. benchmarks/efficiency.py, bf16, every mixer, softmax/xla and /cudnn and none, lengths
#       $PEER_LENGTHS (default 1K-16K), batch $PEER_BATCH (default 32, the papers' tables), in ONE
#       process (--isolate=no: memory = the compiled program's bytes, no process per point),
#       FLOP/s and the fraction of the card's bf16 peak; points past the budget: not run.
#    c. benchmarks/check_cudnn.py if $PEER_CHECK_S seconds (default 40) are left.
#    Results: $OUT/peer/{gpu_peer.json,gpu_peer.md,efficiency.json,efficiency.md,log.txt}; the
#    table's commit column is `git rev-parse --short HEAD`, or $PEER_COMMIT in a copy without .git.
#    PEER_INSTALL=0 uses the python at hand and PEER_DEVICE=cpu runs it all on a CPU (the test,
#    tests/test_gpu_run.py, with tiny PEER_* sizes).
#    PEER_STAGES (default abc) picks stages (the queue's sweep re-run: b).
# 5. Every pending GPU job, in priority order within ONE budget of $QUEUE_BUDGET_S seconds
#    (default 540: a ten-minute call), resumable across calls:
#        bash benchmarks/gpu_run.sh queue
#    (device tool: carry [".official", ".whl", ".gpu_state"]). It restores the last call's files
#    from $QUEUE_STATE (default .gpu_state/: queue.tar, the results so far; listops_*.tar, the
#    ListOps runs), then runs what is not finished, each job given what is left:
#    a. `peer` (mode 4; its sweep is the queue's c), budget min($PEER_BUDGET_S, left);
#    b. compile time: benchmarks/compile_time.py, each family's ListOps paper step alone
#       ($COMPILE_FAMILIES, $COMPILE_SIZE), cold / cached / autotune level 0, one trace;
#    c. the sweep again, alone (peer stage b), if the budget cut it inside `peer`;
#    d. the ListOps long runs in `listops` mode, one group at a time, packs listops_<group>_<k>.tar:
#       spt ($QUEUE_SPT_FAMILIES, default "adamra,spt contextpool,spt": 2 000 pre-training +
#       3 000 fine-tuning steps, docs/results/lra_spt.md) and positions
#       ($QUEUE_POSITIONS_FAMILIES, default "transformer,rotary transformer,rotary,spt,amos",
#       5 pre-training epochs); the 6x512 runs and Pathfinder-32 are listed as pending (why:
#       benchmarks/gpu_queue.py BLOCKED).
#    e. `util`: benchmarks/step_utilisation.py, MFU, FLOP/s and data wait of $UTIL_STEPS steps (60,
#       logged every $UTIL_LOG_EVERY, 20) of each run of $UTIL_RUNS (each family's ListOps
#       paper step, listops:<family>, and PoNet-Base MLM in bf16, mlm; $UTIL_SIZE, full) on one
#       device, beside `summary` of its config; a run is skipped once its run_<run>.json is there;
#    f. `causal`: benchmarks/causal_linear.py at each of $CAUSAL_LENGTHS (4096 16384 65536), one
#       process and file each ($CAUSAL_ENTRIES, $CAUSAL_DTYPE bfloat16, $CAUSAL_ARGS), then
#       benchmarks/generation.py (linear, softmax; $GENERATION_CONTEXTS 1024,65536,
#       $GENERATION_ARGS); a file there is skipped;
#    g. `longest`: benchmarks/efficiency.py, the LRA-text step of $LONGEST_MIXERS at batch
#       $LONGEST_BATCH (1), lengths doubling from $LONGEST_FROM (4096) to $LONGEST_TO (16M),
#       compiled against the card's bytes_limit ($LONGEST_MEMORY_GB, 0), timed where it fits,
#       no longer length once one does not; resumes from its efficiency.json.
#    $QUEUE_JOBS (default "peer compile sweep spt positions util causal longest") picks jobs. $OUT gets queue.md (the
#    status table, job / status / the next call, and every result so far), queue.tar and the
#    groups' packs (the packs of groups that did not run come back unchanged): at most 8 files;
#    copy them all to .gpu_state/ (replacing it) for the next call. QUEUE_INSTALL=0 and tiny
#    sizes run it on a CPU (tests/test_gpu_run.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=(grain==0.2.18 tensorflow-datasets==4.9.10 ml_collections==1.1.0 tensorboardX==2.6.5
        array_record==0.8.6 cloudpickle==3.1.2 dm-tree==0.1.10 docstring_parser==0.18.0
        immutabledict==4.3.1 simple-parsing==0.1.9 tensorflow-metadata==1.21.0 termcolor==3.3.0
        toml==0.10.2 wrapt==2.5.2 portpicker==1.6.0)

MODES=(download float32 bfloat16 listops peer queue)
MODE=${1:-}
if [[ " ${MODES[*]} " != *" $MODE "* ]]; then
  echo "error: mode '$MODE' is not one of ${MODES[*]}; e.g. bash benchmarks/gpu_run.sh bfloat16" >&2
  exit 2
fi

if [[ "$MODE" == download ]]; then
  mkdir -p .whl
  "$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any -d .whl "${WHEELS[@]}"
  # promise is an sdist only: build its (pure-python) wheel here, as the GPU machine has no index
  "$PY" -m pip wheel --no-deps -w .whl promise==2.3
  exit 0
fi

# The carried wheels (.whl/, from the download mode) into /tmp/site, once per machine.
install_wheels() {
  if ! compgen -G '.whl/*.whl' > /dev/null; then
    echo "error: .whl/ holds no wheels; run 'bash benchmarks/gpu_run.sh download' first, on a" \
         "machine with PyPI access, and copy .whl/ beside the repository" >&2
    exit 2
  fi
  [[ -d /tmp/site ]] || "$PY" -m pip install --quiet --no-deps --no-index --target /tmp/site .whl/*
  export PYTHONPATH=/tmp/site:$PWD
}

# A family's config words without `spt` / `spt_causal` (the fine-tuned run's, evaluated like any
# other); with Amos et al.'s recipe (`amos`) its fine-tuning stage `finetune` / `finetune_causal`.
task_words() {
  local w=",$1,"
  if [[ "$w" == *,amos,* ]]; then w=${w//,spt,/,finetune,}; w=${w//,spt_causal,/,finetune_causal,}
  else w=${w//,spt,/,}; w=${w//,spt_causal,/,}; fi
  w=${w#,}; echo "${w%,}"
}

if [[ "$MODE" == listops ]]; then
  OUT=${OUT:-/tmp/gpu_run}
  STATE=${LISTOPS_STATE:-.gpu_state}
  FAMILIES=${LISTOPS_FAMILIES:-transformer linear ponet adamra contextpool}
  SIZE=${LISTOPS_SIZE:-full}
  BUDGET=${LISTOPS_BUDGET_S:-480}
  RUNS=${LISTOPS_RUNS:-/tmp/listops_runs}
  [[ "${LISTOPS_INSTALL:-1}" == 1 ]] && install_wheels
  # One line, before any data or compile, if a wheel is missing (grain needs portpicker, say).
  "$PY" -c 'import grain, tensorflow_datasets, ml_collections, tensorboardX' || exit 2
  mkdir -p "$OUT" "$RUNS"
  for pack in "$STATE"/listops_*.tar; do [[ -f "$pack" ]] && tar xf "$pack" -C "$RUNS"; done
  sets=()   # LISTOPS_ARGS' --config.k=v, for the data preparation
  for arg in ${LISTOPS_ARGS:-}; do [[ "$arg" == --config.* ]] && sets+=(--set "${arg#--config.}"); done
  "$PY" benchmarks/listops_column.py --prepare "$SIZE" "${sets[@]}" 2>&1 | grep -v Warning
  # The runs share the GPU side by side (each takes device memory as it needs it), at most
  # LISTOPS_PARALLEL at once (0: all).
  export XLA_PYTHON_CLIENT_PREALLOCATE=false
  # A GPU step of these 0.2 M-parameter models compiles in 66-121 s (five at once, H200): a call
  # on the same warm machine that resumes a run reads its programs from this cache instead of
  # spending its budget recompiling (2026-11-27: a 120 s resume call did only that).
  export JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR:-/tmp/jax_cache}
  PARALLEL=${LISTOPS_PARALLEL:-0}
  deadline=$((SECONDS + BUDGET))
  running=()
  for family in $FAMILIES; do
    dir="$RUNS/${family//,/-}"
    [[ -f "$dir/eval/test.json" ]] && continue
    if (( PARALLEL > 0 && ${#running[@]} >= PARALLEL )); then
      wait "${running[0]}" || true
      running=("${running[@]:1}")
    fi
    left=$((deadline - SECONDS))
    (( left >= 30 )) || break
    mkdir -p "$dir"
    # 100-step evaluations for a 50-point curve; the reference protocol keeps its own cadence.
    cadence=(--config.eval_every_steps=100 --config.checkpoint_every_steps=100)
    [[ ",$family," == *,reference,* ]] && cadence=(--config.checkpoint_every_steps=100)
    if [[ ",$family," == *,spt,* || ",$family," == *,spt_causal,* ]]; then
      # Self-pretraining: the spt run in DIR/pretrain until it finishes, then the task fine-tuned
      # from its best checkpoint in DIR (the classifier head new); each stage resumes.
      task_words=$(task_words "$family")
      (
        if ! grep -qs '] finished at step' "$dir/pretrain.log"; then
          timeout --signal=TERM --kill-after=60 "$((deadline - SECONDS))" "$PY" train.py \
            --config "configs/lra_listops.py:$family,$SIZE" --workdir "$dir/pretrain" \
            --config.progress_bar=False "${cadence[@]}" ${LISTOPS_ARGS:-} \
            ${LISTOPS_PRETRAIN_ARGS:-} >> "$dir/pretrain.log" 2>&1 || true
          grep -qs '] finished at step' "$dir/pretrain.log" || exit 0
        fi
        left=$((deadline - SECONDS))
        (( left >= 30 )) || exit 0
        timeout --signal=TERM --kill-after=60 "$left" "$PY" train.py \
          --config "configs/lra_listops.py:$task_words,$SIZE" --workdir "$dir" \
          --config.progress_bar=False "${cadence[@]}" --config.init_from="$dir/pretrain" \
          --config.init_from_allow_missing='^head/' ${LISTOPS_ARGS:-} \
          ${LISTOPS_FINETUNE_ARGS:-} >> "$dir/train.log" 2>&1
      ) &
      running+=($!)
      continue
    fi
    timeout --signal=TERM --kill-after=60 "$left" "$PY" train.py \
      --config "configs/lra_listops.py:$family,$SIZE" --workdir "$dir" \
      --config.progress_bar=False "${cadence[@]}" ${LISTOPS_ARGS:-} >> "$dir/train.log" 2>&1 &
    running+=($!)
  done
  for pid in "${running[@]}"; do wait "$pid" || true; done
  # Each finished run's best checkpoint on 2 000 held-out trees (seed 1, none in seed 0's training
  # split; the official TSV format), as docs/results/lra_listops.md evaluates: DIR/heldout.json.
  # LISTOPS_HELDOUT_ARGS sizes them like the training trees (defaults: the paper setting's).
  HELD="$RUNS/heldout_seed1"
  for family in $FAMILIES; do
    dir="$RUNS/${family//,/-}"
    [[ "${LISTOPS_HELDOUT:-1}" == 1 && -f "$dir/eval/test.json" && ! -s "$dir/heldout.json" ]] || continue
    (( deadline + 60 - SECONDS >= 20 )) || break
    [[ -f "$HELD/basic_test.tsv" ]] || "$PY" -m poolformers_jax.data.generators.listops --out_dir "$HELD" \
      --seed 1 --num_test 2000 --exclude_seed 0 ${LISTOPS_HELDOUT_ARGS:-} >> "$RUNS/heldout.log" 2>&1
    "$PY" eval.py --workdir "$dir" --config "configs/lra_listops.py:$(task_words "$family"),$SIZE" --checkpoint best \
      --split test --config.data.source=tsv --config.data.tsv_dir="$HELD" ${LISTOPS_ARGS:-} \
      > "$dir/heldout.json" 2>> "$dir/train.log" || rm -f "$dir/heldout.json"
  done
  "$PY" benchmarks/listops_column.py --runs "$RUNS" --families "$FAMILIES" --pack "$OUT" \
    --pack_name "${LISTOPS_PACK:-listops}" | tee "$OUT/listops.md"
  exit 0
fi

if [[ "$MODE" == queue ]]; then
  start=$SECONDS
  deadline=$((SECONDS + ${QUEUE_BUDGET_S:-540}))
  OUT=${OUT:-/tmp/gpu_run}
  STATE=${QUEUE_STATE:-.gpu_state}
  WORK=${QUEUE_WORK:-/tmp/gpu_queue}
  JOBS=${QUEUE_JOBS:-peer compile sweep spt positions util causal longest}
  UTIL_RUNS=${UTIL_RUNS:-listops:transformer listops:linear listops:ponet listops:adamra listops:contextpool mlm}
  CAUSAL_LENGTHS=${CAUSAL_LENGTHS:-4096 16384 65536}
  RESULTS="$WORK/results" RUNS="$WORK/runs"
  rm -rf "$WORK"; mkdir -p "$OUT" "$RESULTS" "$RUNS" "$WORK/no_state"
  [[ "${QUEUE_INSTALL:-1}" == 1 ]] && install_wheels
  export PEER_INSTALL=0 LISTOPS_INSTALL=0 PYTHON=$PY
  # The state of the last call: the results so far (queue.tar) and the ListOps runs (listops_*.tar).
  [[ -f "$STATE/queue.tar" ]] && tar xf "$STATE/queue.tar" -C "$WORK"
  for pack in "$STATE"/listops_*.tar; do [[ -f "$pack" ]] && tar xf "$pack" -C "$RUNS"; done
  # The ListOps groups: the unfinished SPT fine-tunings (docs/results/lra_spt.md, H200 table) and
  # the positions / Amos et al. runs at the LRA size ("Queued for a GPU"); their 6x512 runs and
  # Pathfinder-32 are listed as pending (gpu_queue.py BLOCKED).
  SPT=${QUEUE_SPT_FAMILIES-adamra,spt contextpool,spt}
  POSITIONS=${QUEUE_POSITIONS_FAMILIES-transformer,rotary transformer,rotary,spt,amos}
  has() { [[ " $JOBS " == *" $1 "* ]]; }
  left() { echo $((deadline - SECONDS)); }
  # a. Side by side with the authors (and the sweep, its stage b), unless a call finished it.
  # A partial one (runs cut by the budget) runs again whole; its new files replace the old.
  if has peer && (( $(left) >= 60 )) && ! "$PY" benchmarks/gpu_queue.py --results "$RESULTS" --peer_done; then
    budget=${PEER_BUDGET_S:-200}; (( budget <= $(left) )) || budget=$(left)
    OUT="$WORK/peer_out" PEER_BUDGET_S=$budget bash "$0" peer || true
    if [[ -f "$WORK/peer_out/peer/gpu_peer.json" ]]; then
      rm -rf "$RESULTS/peer"; mv "$WORK/peer_out/peer" "$RESULTS/peer"
    fi
  fi
  # b. Compile time: each family's ListOps paper step alone; resumes from compile_time.json.
  if has compile && (( $(left) >= 60 )); then
    "$PY" benchmarks/compile_time.py --output_dir "$RESULTS/compile_time" \
      --cache_dir "$WORK/compile_cache" --families "${COMPILE_FAMILIES:-transformer linear ponet adamra contextpool}" \
      --size "${COMPILE_SIZE:-full}" --deadline_s $(( $(left) - 30 )) 2>&1 | grep --line-buffered -v Warning || true
  fi
  # c. The sweep ran in peer; cut by the budget, it runs again alone (the fuller one is kept).
  if has sweep && [[ -f "$RESULTS/peer/efficiency.json" ]] && (( $(left) >= 60 )) &&
      ! "$PY" benchmarks/gpu_queue.py --results "$RESULTS" --sweep_complete; then
    OUT="$WORK/sweep_out" PEER_STAGES=b PEER_BUDGET_S=$(left) bash "$0" peer || true
    "$PY" - "$WORK/sweep_out/peer" "$RESULTS/peer" <<'PYEOF' || true
import json, os, shutil, sys
def ok(d):
  p = os.path.join(d, 'efficiency.json')
  if not os.path.exists(p): return -1
  return sum(v.get('status') == 'ok' for r in json.load(open(p))['results'].values() for v in r.values())
if ok(sys.argv[1]) > ok(sys.argv[2]):
  for name in ('efficiency.json', 'efficiency.md'):
    shutil.copy(os.path.join(sys.argv[1], name), sys.argv[2])
PYEOF
  fi
  # d. The long runs, each group in `listops` mode (its packs listops_<group>_<k>.tar).
  FRESH=""
  run_group() {   # name families pretrain_args finetune_args
    [[ -n "$2" ]] && has "$1" && (( $(left) >= 120 )) || return 0
    "$PY" benchmarks/gpu_queue.py --runs "$RUNS" --finished "$2" && return 0
    OUT="$WORK/listops_$1" LISTOPS_STATE="$WORK/no_state" LISTOPS_RUNS="$RUNS" LISTOPS_FAMILIES="$2" \
      LISTOPS_PACK="listops_$1" LISTOPS_BUDGET_S=$(( $(left) - 90 )) LISTOPS_PRETRAIN_ARGS="$3" \
      LISTOPS_FINETUNE_ARGS="$4" LISTOPS_ARGS="--config.keep_checkpoints=1 ${LISTOPS_ARGS:-}" \
      bash "$0" listops || true
    if compgen -G "$WORK/listops_$1/listops_$1_*.tar" > /dev/null; then
      FRESH+=" listops_$1"
      mv "$WORK/listops_$1/listops_$1"_*.tar "$OUT/"
      cp "$WORK/listops_$1/listops.md" "$RESULTS/listops_$1.md"
    fi
  }
  run_group spt "$SPT" "${QUEUE_SPT_PRETRAIN_ARGS---config.num_train_steps=2000 --config.eval_every_steps=250 --config.checkpoint_every_steps=250}" \
    "${QUEUE_SPT_FINETUNE_ARGS---config.num_train_steps=3000}"
  run_group positions "$POSITIONS" "${QUEUE_POSITIONS_PRETRAIN_ARGS---config.num_train_epochs=5}" ""
  # e. MFU and data wait per run from its metrics.jsonl, beside summary's prediction; a run with
  # its run_<run>.json is skipped, one the budget cuts runs again whole.
  if has util && (( $(left) >= 60 )); then
    "$PY" benchmarks/step_utilisation.py --output_dir "$RESULTS/util" --work "$WORK/util" \
      --runs "$UTIL_RUNS" --size "${UTIL_SIZE:-full}" --steps "${UTIL_STEPS:-60}" \
      --log_every "${UTIL_LOG_EVERY:-20}" --deadline_s $(( $(left) - 20 )) ${UTIL_ARGS:-} 2>&1 \
      | grep --line-buffered -v Warning || true
  fi
  # f. Causal: the chunked training step against its prefix sums and softmax, one process and
  # file per length, then generation's tokens/s against the context; a file there is skipped.
  if has causal; then
    mkdir -p "$RESULTS/causal"
    for n in $CAUSAL_LENGTHS; do
      file="$RESULTS/causal/causal_linear_$n.json"
      [[ ! -f "$file" ]] && (( $(left) >= 60 )) || continue
      rm -f "$WORK/causal.json"
      timeout --kill-after=5 $(( $(left) - 20 )) "$PY" benchmarks/causal_linear.py --lengths "$n" \
        --entries "${CAUSAL_ENTRIES:-linear/prefix_sums,linear/64,softmax/xla,softmax/cudnn,contextpool,msac/split}" \
        --dtype "${CAUSAL_DTYPE:-bfloat16}" --memory_budget_gb 0 --output "$WORK/causal.json" \
        ${CAUSAL_ARGS:-} 2>&1 | grep --line-buffered -v Warning || true
      [[ -f "$WORK/causal.json" ]] && mv "$WORK/causal.json" "$file"
    done
    if [[ ! -f "$RESULTS/causal/generation.json" ]] && (( $(left) >= 60 )); then
      timeout --kill-after=5 $(( $(left) - 20 )) "$PY" benchmarks/generation.py --output_dir \
        "$WORK/generation" --mixers linear,softmax --contexts "${GENERATION_CONTEXTS:-1024,65536}" \
        ${GENERATION_ARGS:-} > "$WORK/generation.log" 2>&1 || tail -3 "$WORK/generation.log"
      [[ -f "$WORK/generation/generation.json" ]] && mv "$WORK/generation/generation.json" "$RESULTS/causal/"
    fi
  fi
  # g. The longest single-device LRA-text step per family: doubling lengths, compiled against
  # the card's bytes_limit (no further length once one does not fit), those that fit timed;
  # resumes from its efficiency.json (points not run for the budget are measured again).
  if has longest && (( $(left) >= 60 )); then
    lengths=() n=${LONGEST_FROM:-4096}
    while (( n <= ${LONGEST_TO:-16777216} )); do lengths+=("$n"); n=$((n * 2)); done
    resume=()
    [[ -f "$RESULTS/longest/efficiency.json" ]] && resume=(--resume_from "$RESULTS/longest/efficiency.json")
    mixers=${LONGEST_MIXERS:-linear,ponet,adamra,softmax/xla,softmax/cudnn,contextpool}
    timeout --kill-after=5 $(( $(left) - 10 )) "$PY" benchmarks/efficiency.py --output_dir \
      "$RESULTS/longest" --dtype "${LONGEST_DTYPE:-bfloat16}" --batch "${LONGEST_BATCH:-1}" \
      --isolate=no --noplot --mixers "$mixers" --lengths "$(IFS=,; echo "${lengths[*]}")" \
      --long_lengths= --linear_memory="$mixers" --repeats 3 --point_budget_s 2 \
      --memory_budget_gb "${LONGEST_MEMORY_GB:-0}" --deadline_s $(( $(left) - 25 )) "${resume[@]}" \
      2>&1 | grep --line-buffered -v Warning || true
  fi
  # The packs of the groups not packed again in this call come back as they were.
  for pack in "$STATE"/listops_*.tar; do
    name=$(basename "$pack")
    [[ -f "$pack" && " $FRESH " != *" ${name%_*} "* ]] && cp "$pack" "$OUT/"
  done
  "$PY" benchmarks/gpu_queue.py --results "$RESULTS" --runs "$RUNS" --group "spt=$SPT" \
    --group "positions=$POSITIONS" --util_runs "$UTIL_RUNS" --causal_lengths "$CAUSAL_LENGTHS" \
    --report "$OUT"
  files=$(find "$OUT" -maxdepth 1 -type f | wc -l)
  (( files <= 8 )) || echo "queue: warning: $files files in \$OUT; the device tool returns 8"
  echo "queue: $((SECONDS - start)) s of ${QUEUE_BUDGET_S:-540}; copy every file of \$OUT to $STATE/ (replacing it) for the next call"
  exit 0
fi

if [[ "$MODE" == peer ]]; then
  start=$SECONDS
  deadline=$((SECONDS + ${PEER_BUDGET_S:-200}))
  OUT=${OUT:-/tmp/gpu_run}
  DIR="$OUT/peer"
  mkdir -p "$DIR"
  LOG="$DIR/log.txt"
  [[ "${PEER_INSTALL:-1}" == 1 ]] && install_wheels
  DEVICE=${PEER_DEVICE:-cuda}
  OFFICIAL=${PEER_OFFICIAL_DIR:-.official/ponet_lra_code}
  TORCH_PY=${PEER_TORCH_PYTHON:-$PY}
  {
    if command -v nvidia-smi > /dev/null; then
      nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 || true
    fi
    echo "installed in $((SECONDS - start)) s"
  } > "$LOG"
  if [[ ! -f "$OFFICIAL/model_wrapper.py" ]]; then
    echo "peer: no official code at $OFFICIAL (lxchtan/PoNet examples/LRA/code): our side only" | tee -a "$LOG"
    TORCH_PY=none
  elif ! "$TORCH_PY" -c 'import torch' 2> /dev/null; then
    echo "peer: $TORCH_PY cannot import torch: our side only" | tee -a "$LOG"
    TORCH_PY=none
  fi
  STAGES=${PEER_STAGES:-abc}
  # a. Side by side: every second left but a reserve for the sweep (PEER_SWEEP_RESERVE_S).
  left=$((deadline - SECONDS - ${PEER_SWEEP_RESERVE_S:-0}))
  if [[ "$STAGES" == *a* ]] && (( left >= 10 )); then
    # Round 2 loads round 1's compiled programs from the cache instead of compiling again.
    JAX_COMPILATION_CACHE_DIR=${PEER_JAX_CACHE:-/tmp/jax_peer_cache} \
    timeout --kill-after=5 "$left" "$PY" benchmarks/official_torch.py \
      --official_dir "$OFFICIAL" --torch_python "$TORCH_PY" --output_dir "$DIR" \
      --output_name gpu_peer --device "$DEVICE" --models "${PEER_MODELS:-ponet,softmax}" \
      --batch "${PEER_TORCH_BATCH:-32}" --length "${PEER_LENGTH:-4096}" \
      --real_tokens "${PEER_REAL_TOKENS:-4000}" --warmup "${PEER_WARMUP:-3}" \
      --steps "${PEER_STEPS:-10}" --rounds "${PEER_ROUNDS:-2}" \
      --our_precisions bfloat16,float32 --our_impls "${PEER_IMPLS:-xla,cudnn}" \
      --our_xla_flags inherit --budget_s $((left - 3)) 2>&1 | grep --line-buffered -v Warning | tee -a "$LOG" || true
  fi
  # b. The sweep in one process, until the deadline (5 s kept to write the files).
  left=$((deadline - SECONDS))
  if [[ "$STAGES" == *b* ]] && (( left >= 15 )); then
    timeout --kill-after=5 "$left" "$PY" benchmarks/efficiency.py --output_dir "$DIR" \
      --dtype bfloat16 --batch "${PEER_BATCH:-32}" --isolate=no --noplot \
      --mixers "${PEER_MIXERS:-softmax/xla,softmax/cudnn,linear,ponet,adamra,contextpool,sac,msac,none}" \
      --lengths "${PEER_LENGTHS:-1024,2048,4096,8192,16384}" --long_lengths= \
      --repeats "${PEER_REPEATS:-5}" --point_budget_s 2 \
      --memory_budget_gb "${PEER_MEMORY_GB:-0}" --deadline_s $((left - 5)) 2>&1 \
      | grep --line-buffered -v Warning | tee -a "$LOG" || true
  fi
  # c. The cuDNN check, if time is left.
  left=$((deadline - SECONDS))
  if [[ "$STAGES" != *c* ]]; then
    :
  elif (( left >= ${PEER_CHECK_S:-40} )); then
    timeout --kill-after=5 "$left" "$PY" benchmarks/check_cudnn.py 2>&1 | grep --line-buffered -v Warning \
      | tee -a "$LOG" || true
  else
    echo "peer: check_cudnn not run ($left s left)" | tee -a "$LOG"
  fi
  echo "peer: done in $((SECONDS - start)) s of ${PEER_BUDGET_S:-200}" | tee -a "$LOG"
  exit 0
fi

install_wheels
DTYPE=$MODE
OUT=${OUT:-/tmp/gpu_run}
mkdir -p "$OUT/$DTYPE"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
"$PY" -c 'import jax; print(jax.__version__, jax.devices(), jax.devices()[0].device_kind)' \
  | tee "$OUT/devices.txt"
"$PY" benchmarks/check_cudnn.py 2>&1 | grep -v Warning | tee "$OUT/check_cudnn.txt"

MIXERS=softmax/explicit,softmax/xla,linear,ponet,adamra,contextpool,none
LINEAR=none,linear,ponet,adamra
if [[ "$DTYPE" != float32 ]]; then
  MIXERS=softmax/explicit,softmax/xla,softmax/cudnn,linear,ponet,adamra,contextpool,none
  LINEAR=none,linear,ponet,adamra,softmax/cudnn
fi
timeout 560 "$PY" benchmarks/efficiency.py --output_dir "$OUT/$DTYPE" --dtype "$DTYPE" \
  --batch 32 --repeats 10 --point_budget_s 5 --mixers "$MIXERS" --linear_memory "$LINEAR" \
  --point_timeout_s 120 2>&1 | grep -v Warning | tee "$OUT/$DTYPE/log.txt"
