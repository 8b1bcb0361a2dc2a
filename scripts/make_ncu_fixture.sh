#!/usr/bin/env bash
# Developers: capture real Nsight Compute exports on the H200 for tests/fixtures/ncu/ and check
# which metric names this ncu knows. Run from the repository root on the device:
#   source gpu-env.sh && bash scripts/make_ncu_fixture.sh
# The exports come from the pipeline's own counters rule (quick configuration, namespace
# ncu-fixture), so a fixture is exactly what `counters` reads. Writes $OUT/ncu.tgz: the query of
# available metrics and the raw CSV export per (operation, default shape), one row per kernel.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export GIT_DIR="$PWD/.no-git-here"  # the device copy's .git (if any) is of another commit
OUT=${OUT:-/tmp/out}; W=/tmp/ncu; NS=ncu-fixture; mkdir -p "$OUT" "$W"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | tail -1)
echo "ncu: $NCU"; "$NCU" --version
"$NCU" --query-metrics --chip gh100 > "$W/query-metrics.txt" 2>&1
python3 - "$W/query-metrics.txt" <<'PY'
import sys
from harness import config
from harness.measure import counters
names = {line.split()[0] for line in open(sys.argv[1]) if line.strip()}
wanted = counters.requested_metrics(config.load("config.yaml")["counters"]["metrics"])
print("metrics this ncu does not know:", [m for m in wanted if m.split(".")[0] not in names] or "none")
PY
mapfile -t targets < <(python3 -c "
from harness import config
c = config.load('config.yaml', 'workflow/configs/defaults-only.yaml')
for op in ('layernorm', 'matmul', 'neighbor_aggregation'): print(f'artifacts/$NS/counters/{op}/{config.shapes(c, op)[0]}.raw.csv')")
snakemake "${targets[@]}" --cores 4 --configfile workflow/configs/defaults-only.yaml --config namespace="$NS" > "$W/snakemake.log" 2>&1
echo "snakemake rc=$?"
for f in "${targets[@]}"; do cp "$f" "$W/$(echo "${f#artifacts/"$NS"/counters/}" | tr / -)" 2>/dev/null || echo "missing: $f"; done
tar czf "$OUT/ncu.tgz" -C "$W" .
