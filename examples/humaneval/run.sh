#!/bin/sh
# Runs the HumanEval problems on a sandfleet fleet, twice:
#   1. the canonical solutions: every job must succeed (164 of 164);
#   2. deliberately broken solutions (--broken): every job must fail.
# It exits non-zero when either expectation does not hold.
#
#   examples/humaneval/run.sh [submit batch flags, e.g. --window 8]
#
# Environment:
#   SUBMIT     the submit binary (default bin/submit; `make build` makes it)
#   NATS_URL   the fleet (default nats://127.0.0.1:4222: `bin/worker --embedded`)
#   HUMANEVAL  the problems, required: HumanEval.jsonl.gz, which is not part of
#              this repository (get data/HumanEval.jsonl.gz from
#              https://github.com/openai/human-eval), or another file of the
#              same shape such as examples/problems/problems.jsonl
#   OUT_DIR    batches, results and summaries (default build/humaneval)
#
# Job IDs are humaneval-<n> and humaneval-broken-<n>: running the script
# again resumes (stored results are reused for 24h, nothing runs twice).
set -eu
cd "$(dirname "$0")/../.."
SUBMIT=${SUBMIT:-bin/submit}
if [ -z "${HUMANEVAL:-}" ] || [ ! -f "$HUMANEVAL" ]; then
	echo "run.sh: set HUMANEVAL=path/to/HumanEval.jsonl.gz (https://github.com/openai/human-eval, data/HumanEval.jsonl.gz)" >&2
	exit 2
fi
OUT_DIR=${OUT_DIR:-build/humaneval}
mkdir -p "$OUT_DIR"

go run ./examples/humaneval -in "$HUMANEVAL" -o "$OUT_DIR/humaneval.jsonl"
go run ./examples/humaneval -in "$HUMANEVAL" -broken -o "$OUT_DIR/humaneval-broken.jsonl"
total=$(grep -c . "$OUT_DIR/humaneval.jsonl")

status=0
echo "== HumanEval, canonical solutions: expect $total of $total succeeded" >&2
echo "\$ $SUBMIT batch $OUT_DIR/humaneval.jsonl -o $OUT_DIR/humaneval.results.jsonl --json${*:+ $*}" >&2
if "$SUBMIT" batch "$OUT_DIR/humaneval.jsonl" -o "$OUT_DIR/humaneval.results.jsonl" --json "$@" \
	>"$OUT_DIR/humaneval.summary.json"; then
	echo "ok: all $total succeeded" >&2
else
	echo "FAIL: not every canonical solution succeeded (exit $?; see $OUT_DIR/humaneval.results.jsonl)" >&2
	status=1
fi

echo "== HumanEval, broken solutions: expect $total of $total failed" >&2
echo "\$ $SUBMIT batch $OUT_DIR/humaneval-broken.jsonl -o $OUT_DIR/humaneval-broken.results.jsonl --json${*:+ $*}" >&2
rc=0
"$SUBMIT" batch "$OUT_DIR/humaneval-broken.jsonl" -o "$OUT_DIR/humaneval-broken.results.jsonl" --json "$@" \
	>"$OUT_DIR/humaneval-broken.summary.json" || rc=$?
# The summary's statuses must be exactly {"failed":<total>}.
if [ "$rc" -eq 1 ] && grep -q "\"statuses\":{\"failed\":$total}" "$OUT_DIR/humaneval-broken.summary.json"; then
	echo "ok: all $total broken solutions failed" >&2
else
	echo "FAIL: broken solutions not all reported failed (exit $rc): $(cat "$OUT_DIR/humaneval-broken.summary.json")" >&2
	status=1
fi
exit $status
