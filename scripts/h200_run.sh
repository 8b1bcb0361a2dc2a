#!/usr/bin/env bash
# Run on the lent H200 (developers' device tool), from the repository root:
#   source gpu-env.sh && bash scripts/h200_run.sh [snakemake targets...]
# Environment: CONFIGFILE=F merges F over config.yaml; NAMESPACE=N writes namespace N (--config);
# AS_TYPED=1 runs the README's main command word for word (`snakemake --cores 1 report`, no
# other option); RUN_TESTS=0 skips the GPU tests; TIERS (default "smoke full") names the tiers of scripts/gpu_tests.py
# to run, TEST_ARGS narrows them (pytest arguments), PRIME=1 times nsys's and ncu's start before them; PROBE=1
# times every start after them (scripts/probe_starts.py; PROBE_ONLY=TEXT only those named so); STATS=1 runs nsys stats on every
# capture; PIPELINE=0 skips the pipeline; CORES (default 4); GPU_SLOTS=K lets K GPU jobs start at
# once (on one GPU the lock still lets one measure at a time: the others import and wait);
# SNAKE_TIMEOUT (seconds, default 540) stops snakemake with SIGINT, so it removes incomplete
# outputs and its lock, and a second call on the same (warm) machine resumes. EVIDENCE_GIT_COMMIT
# names the commit (the device copy has no .git). Everything worth keeping is packed into $OUT;
# a finished namespace is also bundled and verified there ($OUT/bundle.txt). PACK=NAME puts all of
# it into one archive instead, $OUT/NAME.tgz: the device tool brings back at most eight files, so
# several runs in one call each take a PACK name of their own.
set -uo pipefail
# PACK leaves the environment as NAMESPACE does (below), for the same reason: its value is a
# config's name, which the namespace's name holds, and the capture and the bundle withheld it
# ('h200-[PACK withheld]-1'). The archive's path it names stays, a path no report holds.
if [ -n "${PACK:-}" ] && [ -z "${PACK_TO:-}" ]; then
  mkdir -p "${OUT:-/tmp/out}"
  PACK_TO="$(cd "${OUT:-/tmp/out}" && pwd)/$PACK.tgz" OUT=$(mktemp -d) exec env -u PACK bash "$0" "$@"
fi
export PACK_TO=${PACK_TO:-}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The device's copy of the tree may hold a .git of another commit: git must not answer for it, so
# the provenance takes the commit from EVIDENCE_GIT_COMMIT (checked to be a full hash).
export GIT_DIR="$PWD/.no-git-here"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== $(date -u +%FT%TZ) host $(hostname)"; nvidia-smi --query-gpu=name,uuid,driver_version,utilization.gpu,power.draw,clocks.sm,clocks.mem --format=csv
  command -v nsys && env -i PATH="$PATH" LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}" nsys --version  # not with this shell's environment
  python3 -c "import torch, triton, cupy, snakemake, sqlite_utils; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, 'snakemake', snakemake.__version__)"
} 2>&1 | tee -a "$OUT/env.txt"
# The namespace this run writes, resolved before snakemake runs: once its report is finished,
# 'auto' resolves to the next one, and the evidence packed below would miss it.
# NAMESPACE leaves the environment before anything runs: nsys records the environment of every
# process above the captured one (this script's too, as it was started), and the bundle withholds
# every such value it finds in a report, the namespace's own name included, so verify failed on the
# reports it re-renders. The script starts again without it, the name as its first argument.
if [ -n "${NAMESPACE:-}" ]; then
  exec env -u NAMESPACE bash "$0" "--namespace=$NAMESPACE" "$@"
fi
named=
if [[ "${1:-}" == --namespace=* ]]; then named=${1#--namespace=}; shift; fi
ns=${named:-$(python3 -c "import sys; from harness import config; c = config.load('config.yaml', *sys.argv[1:]); print(config.resolve_namespace(c, '.'))" ${CONFIGFILE:-})}
echo "namespace: $ns" | tee -a "$OUT/env.txt"
rc=0
if [ "${RUN_TESTS:-1}" = 1 ]; then
  # each tier adds its section to docs/evidence/gpu-tests/<commit>.txt, copied to $OUT/gpu-tests/ to commit
  # PRIME=1: the first tier first times the tools' start apart (scripts/gpu_tests.py --prime)
  prime=$([ "${PRIME:-0}" = 1 ] && echo --prime)
  for tier in ${TIERS:-smoke full}; do
    python3 scripts/gpu_tests.py "$tier" $prime --out "$OUT/gpu-tests" ${TEST_ARGS:+-- $TEST_ARGS} 2>&1 | tee -a "$OUT/gpu-tests.txt" | tail -25
    prime=
  done
  # where each end-to-end test's run spent its time (pytest keeps its last folders)
  for repo in /tmp/pytest-of-*/pytest-*/test_the_main_command*/repo; do
    case "$repo" in *current*) continue ;; esac  # pytest's links to the latest folders
    [ -d "$repo/artifacts" ] && (cd "$repo" && echo "== $repo" && python3 -m harness job-times gpu-smoke \
      && for r in artifacts/gpu-smoke/measure/*/*/record.json; do python3 -c "import json, sys; print(sys.argv[1], json.load(open(sys.argv[1]))['seconds'])" "$r"; done \
      && grep -hE 'group seconds|session seconds|counters: ncu profile' artifacts/gpu-smoke/logs/measure/session.log artifacts/gpu-smoke/logs/counters/session.log \
      && grep -hE '^\[|^(local)?rule |^Finished job' .snakemake/log/*.snakemake.log) \
      2>&1 | tee -a "$OUT/gpu-tests.txt" | tail -15
    # an end-to-end test that failed: its exports and what nsys stats printed for them come back
    # ($OUT/kept/), so a reader mismatch can become a fixture of tests/fixtures/nsys/
    if grep -q "^FAILED tests/test_end_to_end_gpu.py" "$OUT/gpu-tests.txt"; then
      mkdir -p "$OUT/kept"
      for f in "$repo"/artifacts/gpu-smoke/measure/*/*/capture.sqlite; do
        [ -f "$f" ] && cp "$f" "$OUT/kept/$(echo "${f#"$repo"/artifacts/gpu-smoke/measure/}" | tr / -)"
      done
      cp "$(dirname "$repo")"/stats-*.csv "$OUT/kept/" 2>/dev/null
    fi
  done
fi
# PROBE=1: what each start costs here (scripts/probe_starts.py), into $OUT/starts.txt
[ "${PROBE:-0}" = 1 ] && python3 scripts/probe_starts.py --out "$OUT" ${PROBE_ONLY:+--only "$PROBE_ONLY"}
if [ "${PIPELINE:-1}" = 1 ]; then
  t1=$(date +%s)
  if [ "${AS_TYPED:-0}" = 1 ]; then  # the README's main command, word for word (with CONFIGFILE, its quick one)
    timeout -s INT "${SNAKE_TIMEOUT:-540}" snakemake --cores 1 report ${CONFIGFILE:+--configfile "$CONFIGFILE"} >> "$OUT/snakemake.txt" 2>&1
  else
    timeout -s INT "${SNAKE_TIMEOUT:-540}" snakemake "${@:-report}" --cores "${CORES:-4}" ${GPU_SLOTS:+--resources gpu="$GPU_SLOTS"} --keep-going --rerun-incomplete ${CONFIGFILE:+--configfile "$CONFIGFILE"} ${named:+--config namespace="$named"} >> "$OUT/snakemake.txt" 2>&1
  fi
  rc=$?
  grep -E "Error in rule|steps \(|CheckFailed|check failed|no CUDA|not found" "$OUT/snakemake.txt" | tail -25
  echo "snakemake: $(( $(date +%s) - t1 )) s, rc=$rc" | tee -a "$OUT/snakemake.txt"
fi
# STATS=1: nsys stats' own figures for every group's export, to test the reader against (~2 s each)
mkdir -p /tmp/stats
for f in $( [ "${STATS:-0}" = 1 ] && ls artifacts/"$ns"/measure/*/*/capture.sqlite 2>/dev/null ); do
  [ -f "$f" ] || continue
  tag=$(echo "${f#artifacts/$ns/measure/}" | sed 's#/#-#g; s#-capture\.sqlite$##')
  [ -f "/tmp/stats/${tag}_nvtx_kern_sum.csv" ] && continue
  nsys stats -r cuda_gpu_kern_sum,nvtx_kern_sum --format csv --force-export false -o "/tmp/stats/$tag" "$f" >/dev/null 2>&1 \
    || echo "nsys stats failed on $f"
done
python3 -m harness job-times "$ns" 2>&1 | tee "$OUT/job-times.txt" | tail -15
# The bundle is made and verified here, with the exports (which stay on this machine): the copy of
# the tree that comes back has none, and the next call's copy no longer holds the namespace's tables.
if [ "${PIPELINE:-1}" = 1 ] && [ -f "report/$ns/field_note.md" ]; then
  { python3 -m harness bundle "$ns" --out "/tmp/$ns.evidence.tar.gz" --force && ls -la "/tmp/$ns.evidence.tar.gz" \
      && python3 -m harness verify "/tmp/$ns.evidence.tar.gz"; echo "bundle and verify: exit $?"; } 2>&1 | tail -8 | tee "$OUT/bundle.txt"
fi
tar czf "$OUT/evidence.tgz" --exclude='*.nsys-rep' --exclude='*.ncu-rep' --exclude='capture.sqlite' --exclude="artifacts/$ns/build" \
  "artifacts/$ns" "report/$ns" -C /tmp stats 2>/dev/null
ls -la "$OUT"
if [ -n "$PACK_TO" ]; then tar czf "$PACK_TO" -C "$OUT" . && ls -la "$PACK_TO"; fi
exit "$rc"
