#!/usr/bin/env bash
# A teacher translating a corpus at int8 speed: one trained run exported as our SavedModel (graph),
# as batched LiteRT float32 and int8 exports and as CTranslate2 int8, each translating the same
# corpus with kt-translate-corpus (its lines/s line), then each output scored against the
# references with sacreBLEU (13a, as kt-evaluate). The search is the run's recipe's (kt-export's
# defaults) for every export.
#
#     bash benchmarks/teacher_speed.sh RUN SOURCE REFERENCE WORK_DIR [BATCH_SIZE]
#
# e.g. RUN a multi30k run, SOURCE/REFERENCE ../shared/data/multi30k/test_2016_flickr.{en,de}.gz;
# BATCH_SIZE is kt-translate-corpus's --batch-size (default 64). WORK_DIR gets the exports, each
# system's translation and log, and summary.tsv (system, lines/s, BLEU, chrF).
set -euo pipefail
RUN="${1:?usage: teacher_speed.sh RUN SOURCE REFERENCE WORK_DIR [BATCH_SIZE]}"
SOURCE="${2:?}"
REFERENCE="${3:?}"
WORK="$(realpath -m "${4:?}")"
BATCH="${5:-64}"
cd "$(dirname "$0")/.."
mkdir -p "$WORK/exports"
export_once() {  # NAME [kt-export options]
  local name="$1"
  shift
  [ -e "$WORK/exports/$name" ] || python -m trainers export "$RUN" --name "$name" \
    --base-dir "$WORK/exports" "$@"
}
export_once saved
export_once litert_float32 --format litert --quantization float32
export_once litert_int8 --format litert --quantization int8
export_once ctranslate2_int8 --format ctranslate2 --quantization int8
zcat -f "$SOURCE" > "$WORK/source.txt"
zcat -f "$REFERENCE" > "$WORK/reference.txt"
printf 'system\tlines_per_second\tBLEU\tchrF\n' > "$WORK/summary.tsv"
for name in saved litert_float32 litert_int8 ctranslate2_int8; do
  rm -rf "$WORK/$name.out"*
  python -m trainers translate_corpus "$WORK/exports/$name" "$WORK/source.txt" \
    --output "$WORK/$name.out" --batch-size "$BATCH" 2> "$WORK/$name.log"
  rate="$(grep -o '([0-9.,]* lines/s)' "$WORK/$name.log" | tail -1 | tr -d '(),' | cut -d' ' -f1)"
  scores="$(sacrebleu "$WORK/reference.txt" -i "$WORK/$name.out" -m bleu chrf -b -w 2 --format text | paste -s)"
  printf '%s\t%s\t%s\n' "$name" "$rate" "$scores" | tee -a "$WORK/summary.tsv"
done
