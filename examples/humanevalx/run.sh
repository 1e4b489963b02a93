#!/bin/sh
# Runs HumanEval-X on a sandfleet fleet: for each language (python, cpp,
# java, js, go, rust) its canonical solutions, which should all succeed,
# and broken ones, which must all fail. It prints each batch's summary and
# exits non-zero when a broken solution succeeded or a batch could not run.
# Canonical failures are reported, not fatal: some of the dataset's
# problems are broken in some languages (docs/evals.md, "HumanEval-X").
#
#   examples/humanevalx/run.sh [submit batch flags]
#
# Environment: SUBMIT (default bin/submit), NATS_URL, HUMANEVALX (default
# ../shared/data/humaneval-x), LANGS (default all six), OUT_DIR (default
# build/humaneval-x).
set -eu
cd "$(dirname "$0")/../.."
SUBMIT=${SUBMIT:-bin/submit}
DIR=${HUMANEVALX:-../shared/data/humaneval-x}
OUT_DIR=${OUT_DIR:-build/humaneval-x}
LANGS=${LANGS:-python cpp java js go rust}
if [ ! -f "$DIR/humaneval_python.jsonl.gz" ]; then
	echo "run.sh: HumanEval-X not in $DIR: set HUMANEVALX=DIR (humaneval_<lang>.jsonl.gz, from THUDM/CodeGeeX)" >&2
	exit 2
fi
mkdir -p "$OUT_DIR"
status=0
for lang in $LANGS; do
	for kind in canonical broken; do
		flag=
		[ "$kind" = broken ] && flag=--broken
		go run ./examples/humanevalx/cmd -dir "$DIR" -lang "$lang" $flag -o "$OUT_DIR/$lang-$kind.jsonl"
		echo "== HumanEval-X $lang, $kind" >&2
		rc=0
		"$SUBMIT" batch "$OUT_DIR/$lang-$kind.jsonl" -o "$OUT_DIR/$lang-$kind.results.jsonl" --json "$@" \
			>"$OUT_DIR/$lang-$kind.summary.json" || rc=$?
		case "$kind:$rc" in
		canonical:0 | broken:1) ;;
		canonical:1) echo "note: not every canonical $lang solution succeeded (see $OUT_DIR/$lang-canonical.results.jsonl)" >&2 ;;
		*) echo "FAIL: $lang $kind exited $rc" >&2; status=1 ;;
		esac
		if [ "$kind" = broken ] && ! grep -q '"passed":0,' "$OUT_DIR/$lang-broken.summary.json"; then
			echo "FAIL: a broken $lang solution succeeded" >&2
			status=1
		fi
	done
done
exit $status
