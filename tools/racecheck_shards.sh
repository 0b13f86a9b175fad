#!/usr/bin/env bash
# racecheck over one test file's GPU tests in N parallel shards, every shard's full report kept, then the
# hazards counted by the kernel they were reported in (the ledger's sanitizer run keeps only a summary and
# the last shard's tail, so it cannot say which kernel a hazard belongs to).
#   bash tools/racecheck_shards.sh tests/test_w4a16_mma.py 6 OUTDIR
set -u
file=${1:?test file}; shards=${2:-6}; out=${3:-racecheck_out}
mkdir -p "$out"
t0=$(date +%s)
python3 -m pytest --collect-only -q -p no:cacheprovider -m "gpu and not slow and not timing" "$file" \
  | grep "^tests/" > "$out/ids.txt"
echo "$(wc -l < "$out/ids.txt") tests in $shards shards"
for ((s = 0; s < shards; s++)); do
  ( timeout 440 compute-sanitizer --tool racecheck --error-exitcode 86 --target-processes all \
      python3 -m pytest -q -p no:cacheprovider $(awk -v s=$s -v n=$shards 'NR % n == s' "$out/ids.txt") \
      > "$out/shard$s.log" 2>&1
    echo "shard $s rc=$? at $(( $(date +%s) - t0 )) s" >> "$out/rc.txt" ) &
done
wait
cat "$out/rc.txt"
grep -h "RACECHECK SUMMARY" "$out"/shard*.log
echo "== hazards by kernel (read side, then write side)"
grep -h "Race reported between" "$out"/shard*.log | sed -E 's/.* at ([A-Za-z0-9_]+).*/\1/' | sort | uniq -c
grep -h "and Write access at\|and Read access at" "$out"/shard*.log | sed -E 's/.* at ([A-Za-z0-9_]+).*/\1/' | sort | uniq -c
