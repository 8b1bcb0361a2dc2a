#!/usr/bin/env bash
# Developers: capture real Nsight Compute exports on the H200 for tests/fixtures/ncu/ and check
# which metric names this ncu knows. Run from the repository root on the device:
#   source gpu-env.sh && bash scripts/make_ncu_fixture.sh
# Writes $OUT/ncu.tgz: the query of available metrics, one .ncu-rep and its raw CSV export per case.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/out}; W=/tmp/ncu; mkdir -p "$OUT" "$W"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu | tail -1)
echo "ncu: $NCU"; "$NCU" --version
"$NCU" --query-metrics --chip gh100 > "$W/query-metrics.txt" 2>&1
metrics=$(python3 -c "from harness import counters, config; print(','.join(counters.metric_names(config.load('config.yaml')['counters']['metrics'])))")
known=$(python3 - "$W/query-metrics.txt" "$metrics" <<'PY'
import sys
names = {line.split()[0] for line in open(sys.argv[1]) if line.strip()}
ok, bad = [], []
for m in sys.argv[2].split(","):
    (ok if m.split(".")[0] in names else bad).append(m)
print(",".join(ok)); print("unknown:", bad, file=sys.stderr)
PY
)
python3 -c "
import json; from harness import config
c = config.load('config.yaml'); c['capture'].update(warmup=2, iterations=2)
open('$W/cfg.json', 'w').write(json.dumps(c))"
for case in layernorm:4096x768:triton layernorm:4096x768:cuda layernorm:4096x768:torch neighbor_aggregation:65536x1048576x64:torch matmul:1024x1024x1024:torch; do
  IFS=: read -r op shape impl <<< "$case"; tag="$op-$shape-$impl"; t0=$(date +%s.%N)
  "$NCU" --clock-control none --nvtx --nvtx-include "capture/" --metrics "$known" -f -o "$W/$tag" \
    python3 -m harness target --config "$W/cfg.json" --op "$op" --shape "$shape" --impl "$impl" > "$W/$tag.log" 2>&1
  echo "$tag: rc=$? $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  "$NCU" --import "$W/$tag.ncu-rep" --csv --page raw > "$W/$tag.raw.csv" 2>> "$W/$tag.log"
done
tar czf "$OUT/ncu.tgz" -C "$W" .
