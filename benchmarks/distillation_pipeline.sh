#!/usr/bin/env bash
# The Multi30k teacher-to-student pipeline of docs/training.md as one resumable job: the
# benchmark's text form, two teachers (the recipe, seeds 1 and 2), their ensemble translating
# train (beam 5), two students of the recipe's size and two deep-encoder/shallow-decoder students
# (8 + 1 and 6 + 2 layers) on the originals plus the distilled targets, each scored on
# test_2016_flickr, then one sentence at a time through the deep students' and a teacher's
# exports; then the attempts at the target (below: data diversification, Seq-Inter, twice the
# steps, sampled translations, diversification for twice the steps). About 8 hours on 2 CPU
# cores, 1.5 more for each attempt's first student (with its translations), 1.2 for a second (2.4
# for one trained twice the steps from the start); run it in the background:
#
#     nohup nice -n 19 bash benchmarks/distillation_pipeline.sh WORK_DIR > WORK_DIR.log 2>&1 &
#
# WORK_DIR (outside the checkout) gets data/, runs/, distilled/, scores/, stages.log (each stage's
# start and end) and heartbeat.tsv (the running stage, once a minute: the time each stage took
# across stops, which `benchmarks/distillation_report.py WORK_DIR` turns into the RESULTS tables).
# Run the same command again after a stop: a finished stage is skipped, a killed kt-train resumes
# from its backup, a killed corpus translation from its written chunks.
# KT_PIPELINE_STEPS (the recipe's 8000), KT_PIPELINE_TRAIN_ARGS (added to every kt-train, later
# arguments win), KT_PIPELINE_SPEED_ARGS (added to student_speed.py) and KT_PIPELINE_SAMPLING
# (the sampled translation's flags, "--top-p 0.9 --seed 1") shrink it for a rehearsal, e.g. the
# test's tiny models and steps. KT_PIPELINE_PYTHON (default python) runs the Moses form and
# student_speed.py, the steps that import TensorFlow (the test's starts them warm).
# KT_PIPELINE_STOP_AFTER names a stage as stages.log does (e.g. "scoring teachers", or an
# attempt's PREFIX below, e.g. student_diverse): the job stops once that stage is done, and the
# same command without it goes on from there (the test runs the pipeline in parts so).
set -euo pipefail
WORK="$(realpath -m "${1:?usage: distillation_pipeline.sh WORK_DIR}")"
cd "$(dirname "$0")/.."
M="${KT_SHARED_DATA:-../shared/data}/multi30k"
D="$WORK/data"
mkdir -p "$D" "$WORK/runs" "$WORK/distilled" "$WORK/scores"
log() { echo "$(date -u +%FT%TZ) $*" | tee -a "$WORK/stages.log"; }
done_with() {  # STAGE: the job ends here when KT_PIPELINE_STOP_AFTER names STAGE
  if [ "$1" = "${KT_PIPELINE_STOP_AFTER:-}" ]; then
    echo "stopped after $1 (KT_PIPELINE_STOP_AFTER)"
    exit 0
  fi
}
PYTHON="${KT_PIPELINE_PYTHON:-python}"
heartbeat() {  # a stopped machine (or script) stops this clock too: stops cost no stage time
  while sleep "${KT_PIPELINE_HEARTBEAT_SECONDS:-60}" && kill -0 $$ 2> /dev/null; do
    echo "$(date +%s) $(grep ' start ' "$WORK/stages.log" 2> /dev/null | tail -1 | cut -d' ' -f3-)" \
      >> "$WORK/heartbeat.tsv"
  done
}
heartbeat &
HEARTBEAT=$!
trap 'kill "$HEARTBEAT"' EXIT

for split in train val test_2016_flickr; do
  [ -s "$D/$split.de" ] || "$PYTHON" -m trainers moses_form --src "$M/$split.en.gz" \
    --tgt "$M/$split.de.gz" --langs en de --output-prefix "$D/$split"
done
STEPS="${KT_PIPELINE_STEPS:-8000}"
RECIPE=(--preset multi30k --steps "$STEPS" --checkpoint-every-steps 100 --keep-checkpoints 10
  --dev-src "$D/val.en" --dev-tgt "$D/val.de" --test-src "$D/test_2016_flickr.en"
  --test-tgt "$D/test_2016_flickr.de" --eval-every 1000 --eval-sentences 400 --no-export)
train() {  # NAME, then kt-train's corpus and seed arguments
  local name=$1; shift
  if [ ! -f "$WORK/runs/$name/result.json" ]; then
    log "start $name"
    # shellcheck disable=SC2086  # the extra arguments are meant to split on spaces
    kt-train "${RECIPE[@]}" "$@" ${KT_PIPELINE_TRAIN_ARGS:-} --output-dir "$WORK/runs/$name"
    log "end $name"
  fi
  done_with "$name"
}

ORIGINAL=(--train-src "$D/train.en" --train-tgt "$D/train.de")
train teacher_s1 "${ORIGINAL[@]}" --seed 1
train teacher_s2 "${ORIGINAL[@]}" --seed 2
translate() {  # STAGE OUTPUT RUN, then more of kt-translate-corpus's arguments: train, beam 5
  local stage=$1 output=$2 run=$3; shift 3
  if [ ! -s "$output" ]; then
    log "start $stage"
    kt-translate-corpus "$run" "$D/train.en" "$@" --beam-size 5 --output "$output"
    log "end $stage"
  fi
  done_with "$stage"
}
translate "translation of train" "$WORK/distilled/train.de" "$WORK/runs/teacher_s1" \
  --ensemble "$WORK/runs/teacher_s2"
DISTILLED=("${ORIGINAL[@]}" --train-src "$D/train.en" --train-tgt "$WORK/distilled/train.de")
train student_s1 "${DISTILLED[@]}" --seed 1
train student_s2 "${DISTILLED[@]}" --seed 2
# Deep encoders, shallow decoders: Kasai et al.'s one-layer decoder, and two decoder layers.
train student_deep_s1 "${DISTILLED[@]}" --seed 1 --set num_encoder_layers=8 --set num_decoder_layers=1
train student_e6d2_s1 "${DISTILLED[@]}" --seed 1 --set num_encoder_layers=6 --set num_decoder_layers=2

score() {  # NAME, then kt-evaluate's model arguments: tokenized BLEU on test_2016_flickr
  local name=$1; shift
  if [ ! -f "$WORK/scores/$name.json" ]; then
    log "start scoring $name"
    kt-evaluate "$@" --src "$D/test_2016_flickr.en" --ref "$D/test_2016_flickr.de" \
      --hypotheses "$WORK/scores/$name.hyp" > "$WORK/scores/$name.txt"
    sacrebleu "$D/test_2016_flickr.de" -i "$WORK/scores/$name.hyp" --tokenize none -lc -w 2 \
      > "$WORK/scores/$name.json.partial"
    mv "$WORK/scores/$name.json.partial" "$WORK/scores/$name.json"
  fi
  done_with "scoring $name"
}
for run in teacher_s1 teacher_s2 student_s1 student_s2 student_deep_s1 student_e6d2_s1; do
  score "$run" "$WORK/runs/$run"
done
score teachers "$WORK/runs/teacher_s1" --ensemble "$WORK/runs/teacher_s2"
if [ ! -s "$WORK/student_speed.txt" ]; then
  log "start student_speed"
  # shellcheck disable=SC2086
  "$PYTHON" benchmarks/student_speed.py "$WORK/runs/"{teacher_s1,student_deep_s1,student_e6d2_s1} \
    --src "$D/test_2016_flickr.en" --beam-size 5 --ctranslate2 float32 ${KT_PIPELINE_SPEED_ARGS:-} \
    > "$WORK/student_speed.txt.partial"
  mv "$WORK/student_speed.txt.partial" "$WORK/student_speed.txt"
fi
done_with student_speed

# Attempts at the target when the students stall below it, each from its first student: PREFIX_s1
# trained and scored, then PREFIX_s2 only when PREFIX_s1 beats student_s1 on dev.
continued() {  # FROM NAME: NAME starts as a copy of the finished run FROM, for kt-train to continue
  # (a run FROM never trained, e.g. the second seed of an attempt stopped after its first: NAME
  # trains from the start, the same run)
  local from=$1 name=$2
  if [ -d "$WORK/runs/$name" ] || [ ! -f "$WORK/runs/$from/result.json" ]; then return; fi
  rm -rf "$WORK/runs/$name.copy"
  cp -r "$WORK/runs/$from" "$WORK/runs/$name.copy"
  rm "$WORK/runs/$name.copy/result.json"
  mv "$WORK/runs/$name.copy" "$WORK/runs/$name"
}
attempt() {  # PREFIX FROM (the runs each seed continues, FROM_sN, or ""), then kt-train's arguments
  local prefix=$1 from=$2 seed name; shift 2
  for seed in 1 2; do
    name="${prefix}_s$seed"
    if [ "$seed" = 2 ] && ! python benchmarks/distillation_report.py "$WORK" \
        --better-on-dev "${prefix}_s1" student_s1; then
      break
    fi
    [ -z "$from" ] || continued "${from}_s$seed" "$name"
    train "$name" "$@" --seed "$seed"
    score "$name" "$WORK/runs/$name"
  done
  done_with "$prefix"
}

# Data diversification (Nguyen et al. 2020): each teacher's own translation of train as a corpus
# of its own beside the originals and the ensemble's (116,000 pairs).
for teacher in teacher_s1 teacher_s2; do
  translate "translation of train by $teacher" "$WORK/distilled/train.$teacher.de" \
    "$WORK/runs/$teacher"
done
DIVERSE=("${DISTILLED[@]}")
for teacher in teacher_s1 teacher_s2; do
  DIVERSE+=(--train-src "$D/train.en" --train-tgt "$WORK/distilled/train.$teacher.de")
done
attempt student_diverse "" "${DIVERSE[@]}"

# Kim & Rush's Seq-Inter (2016): the ensemble's beam hypothesis nearest the reference (sentence
# BLEU) instead of its best-scored one, beside the originals (58,000 pairs).
translate "translation of train nearest the references" "$WORK/distilled/train.closest.de" \
  "$WORK/runs/teacher_s1" --ensemble "$WORK/runs/teacher_s2" --closest-to-reference "$D/train.de"
attempt student_closest "" "${ORIGINAL[@]}" --train-src "$D/train.en" \
  --train-tgt "$WORK/distilled/train.closest.de"

# The students trained twice as long (their dev BLEU still rose at the recipe's last steps; they
# see each of their 58,000 pairs half as often as a teacher its 29,000), each a copy of its
# finished run continued to twice the steps: the batches and weights of one run that long.
attempt student_longer student "${DISTILLED[@]}" --steps $((2 * STEPS))

# Edunov et al.'s (2018) sampled translations: the ensemble's samples of train (nucleus, top-p
# 0.9), a corpus beside the originals and the ensemble's beam output (87,000 pairs).
# shellcheck disable=SC2086
translate "translation of train by sampling" "$WORK/distilled/train.sampled.de" \
  "$WORK/runs/teacher_s1" --ensemble "$WORK/runs/teacher_s2" \
  ${KT_PIPELINE_SAMPLING:---top-p 0.9 --seed 1}
attempt student_sampled "" "${DISTILLED[@]}" --train-src "$D/train.en" \
  --train-tgt "$WORK/distilled/train.sampled.de"

# The two routes with a dev gain together: the diversification corpora (116,000 pairs) for twice
# the steps, seed 1 continuing student_diverse_s1.
attempt student_diverse_longer student_diverse "${DIVERSE[@]}" --steps $((2 * STEPS))
log "pipeline done"
