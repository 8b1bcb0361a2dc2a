#!/usr/bin/env bash
# Several runs in one call of the lent GPU machine, each packed apart, each started only while the
# call has its time left. From the repository root there (docs/gpu-machine.md):
#   source gpu-env.sh && EVIDENCE_GIT_COMMIT=<commit> LIMIT=540 bash scripts/device_call.sh suite main resolution cap-resolution
# Words, run in the order given, each through scripts/h200_run.sh:
#   suite         the GPU tests (TIERS, default full), no pipeline                  -> $OUT/suite.tgz
#   main          the README's main command as typed (a full run), no tests         -> $OUT/main.tgz
#   NAME          one run of workflow/configs/NAME.yaml, no tests                   -> $OUT/NAME.tgz (again: NAME-2.tgz)
#   WORD:SECONDS  the same with a budget of its own (defaults: suite 240, main 180, a config 75)
# LIMIT (seconds, default 540): a run starts only while its budget is left of LIMIT, and its
# Snakemake is stopped cleanly at its budget (SNAKE_TIMEOUT), so the call ends inside the device
# tool's limit with every finished run packed. A machine that starts late or fails costs device
# time all the same: put everything the session must measure into the first call that starts.
# At most eight words: the device tool brings back eight files.
# ONLY_ON (optional, e.g. H200): run nothing unless nvidia-smi names a GPU whose name holds it; the
# call then ends in seconds, one sentence saying which GPU came (the tool lends an H100 for
# nvidia-h200 at times; a run that only an H200 can settle should not spend a session on another).
set -u
run=${H200_RUN:-scripts/h200_run.sh}
limit=${LIMIT:-540}
[ "$#" -ge 1 ] && [ "$#" -le 8 ] || { echo "device_call: give one to eight words (suite, main, a config's name)." >&2; exit 2; }
names=(); budgets=()
for word in "$@"; do  # every word checked before any run starts
  name=${word%%:*}; budget=${word#"$name"}; budget=${budget#:}
  if ! [[ "$name" =~ ^[a-z0-9][a-z0-9_-]*$ ]] || ! [[ "${budget:-1}" =~ ^[1-9][0-9]*$ ]] || [[ "$word" == *: ]]; then
    echo "device_call: '$word' is not a word this script takes (suite, main or a config's name, then :SECONDS)." >&2; exit 2
  fi
  case $name in
    suite) budget=${budget:-240} ;;
    main) budget=${budget:-180} ;;
    *)
      if [ ! -f "workflow/configs/$name.yaml" ]; then
        echo "device_call: there is no workflow/configs/$name.yaml." >&2; exit 2
      fi
      budget=${budget:-75} ;;
  esac
  names+=("$name"); budgets+=("$budget")
done
if [ -n "${EVIDENCE_GIT_COMMIT:-}" ] && ! [[ "$EVIDENCE_GIT_COMMIT" =~ ^[0-9a-f]{40}$ ]]; then
  echo "device_call: EVIDENCE_GIT_COMMIT is '${EVIDENCE_GIT_COMMIT:0:60}', not a full commit hash (40 lower-case hex digits: git rev-parse HEAD), so nothing was run." >&2
  exit 2
fi
if [ -n "${ONLY_ON:-}" ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  case $gpu in
    *"$ONLY_ON"*) echo "device_call: $gpu, as ONLY_ON=$ONLY_ON asks" ;;
    *) echo "device_call: the GPU here is ${gpu:-none nvidia-smi can name}, not the $ONLY_ON that ONLY_ON asks for, so nothing was run." >&2; exit 2 ;;
  esac
fi
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
declare -A times
for i in "${!names[@]}"; do
  name=${names[$i]}; budget=${budgets[$i]}
  n=$(( ${times[$name]:-0} + 1 )); times[$name]=$n
  pack=$name; [ "$n" -gt 1 ] && pack=$name-$n
  case $name in
    suite) set_env=(PACK="$pack" TIERS="${TIERS:-full}" PIPELINE=0) ;;
    main) set_env=(PACK="$pack" RUN_TESTS=0 AS_TYPED=1) ;;
    *) set_env=(PACK="$pack" RUN_TESTS=0 CONFIGFILE="workflow/configs/$name.yaml") ;;
  esac
  left=$(( limit - $(elapsed) ))
  if [ "$left" -lt "$budget" ]; then
    echo "$pack: not started, $left s of the call left and its budget $budget s"
    continue
  fi
  echo "$pack: started at $(elapsed) s"
  env "${set_env[@]}" SNAKE_TIMEOUT="$budget" bash "$run" 2>&1 \
    | grep -E '^namespace:|^snakemake:|bundle and verify|[0-9]+ (passed|failed)|^(FAILED|ERROR) ' | tail -8
  echo "$pack: ended at $(elapsed) s"
done
echo "call: $(elapsed) s"
