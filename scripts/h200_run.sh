#!/usr/bin/env bash
# Full run on the lent H200 (developers' device tool): GPU tests, then the whole pipeline, then
# everything worth keeping packed into $OUT. Usage there, from the repository root:
#   source gpu-env.sh && bash scripts/h200_run.sh [snakemake args...]
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  echo "== $(date -u +%FT%TZ) host $(hostname)"; nvidia-smi --query-gpu=name,uuid,driver_version,utilization.gpu,power.draw,clocks.sm,clocks.mem --format=csv
  command -v nsys && nsys --version
  python3 -c "import torch, triton, cupy, snakemake, sqlite_utils; print('torch', torch.__version__, 'triton', triton.__version__, 'cupy', cupy.__version__, 'snakemake', snakemake.__version__)"
} 2>&1 | tee "$OUT/env.txt"
t0=$(date +%s)
python3 -m pytest -q -m gpu -p no:cacheprovider 2>&1 | tee "$OUT/gpu-tests.txt"
t1=$(date +%s)
snakemake --cores 1 "${@:-report}" 2>&1 | tee "$OUT/snakemake.txt"
rc=${PIPESTATUS[0]}
t2=$(date +%s)
echo "gpu tests: $((t1 - t0)) s; snakemake: $((t2 - t1)) s; snakemake rc=$rc" | tee -a "$OUT/snakemake.txt"
ns=$(python3 -c "from harness import config; print(config.load()['namespace'])")
# nsys stats' own figures for every capture, to test the reader against
mkdir -p /tmp/stats
for f in artifacts/"$ns"/capture/*/*/*.sqlite; do
  [ -f "$f" ] || continue
  tag=$(echo "${f#artifacts/$ns/capture/}" | sed 's#/#-#g; s#\.sqlite$##')
  nsys stats -r cuda_gpu_kern_sum,nvtx_kern_sum --format csv --force-export false -o "/tmp/stats/$tag" "$f" >/dev/null 2>&1 \
    || echo "nsys stats failed on $f"
done
tar czf "$OUT/evidence.tgz" --exclude='*.nsys-rep' "artifacts/$ns" "report/$ns" -C /tmp stats 2>/dev/null
ls -la "$OUT"
exit "$rc"
