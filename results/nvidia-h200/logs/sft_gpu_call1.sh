python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl_slim/*.whl && export PYTHONPATH=/tmp/site:$PYTHONPATH PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
L=$OUT/logs; mkdir -p $L
(python3 -m pytest -q -p no:cacheprovider tests/test_train_sft.py tests/test_quant.py > $L/gpu_tests.log 2>&1; echo rc=$? >> $L/gpu_tests.log) &
S="python3 -m t4lib.train.sft --epochs 8"
$S --base fp32 --method full --lr 5e-4 --before --save $OUT/tiny-gpu-sft --out $OUT/sft_full_lr5e-4.json > $L/sft_full_lr5e-4.log 2>&1 &
$S --base fp32 --method full --lr 1e-3 --epochs 4 --out $OUT/sft_full_lr1e-3_ep4.json > $L/sft_full_lr1e-3.log 2>&1 &
for s in 0 1 2; do for b in fp16 w4a16; do
$S --base $b --method lora --lr 2e-3 --seed $s --out $OUT/sft_lora_${b}_s$s.json > $L/sft_lora_${b}_s$s.log 2>&1 &
done; done
wait
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $L/nvidia_smi.txt
python3 -m t4lib.train.lora_bench --out $OUT/lora_bench.json > $L/lora_bench.log 2>&1
tail -3 $L/*.log
