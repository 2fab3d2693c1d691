#!/usr/bin/env bash
# language_id.sh — the language-identification example (README: "Sequence classification"):
# words of Debian's word lists → label<TAB>word TSV → lstmd prepare classify → lstmd train with
# deploy/examples/language_id.ini → lstmd eval (accuracy, confusion) → lstmd classify.
#
# The lists are read from /usr/share/dict (deploy/install-deps.sh installs wamerican, wngerman,
# wfrench, witalian, wspanish); any that is missing is fetched with `apt-get download` and
# unpacked with dpkg-deb into WORK. Words with an apostrophe (English possessives) and words
# found in more than one list are dropped, then WORDS of each language are drawn with a fixed
# seed.
#
# usage: deploy/examples/language_id.sh [LSTMD] (env: WORK=work/language_id WORDS=20000, and
#        any extra `lstmd train` arguments in TRAIN_ARGS, e.g. "--set train.steps=500")
set -euo pipefail
LSTMD=${1:-lstmd}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=${WORK:-work/language_id}
WORDS=${WORDS:-20000}
mkdir -p "$WORK/lists" prepared
declare -A FILE=([en]=american-english [de]=ngerman [fr]=french [it]=italian [es]=spanish)
declare -A PKG=([en]=wamerican [de]=wngerman [fr]=wfrench [it]=witalian [es]=wspanish)
for lang in en de fr it es; do
  list=/usr/share/dict/${FILE[$lang]}
  if [[ ! -r $list ]]; then
    list=$WORK/deb/usr/share/dict/${FILE[$lang]}
    if [[ ! -r $list ]]; then
      (cd "$WORK" && apt-get download "${PKG[$lang]}" >/dev/null)
      dpkg-deb -x "$WORK"/"${PKG[$lang]}"_*.deb "$WORK/deb"
    fi
  fi
  grep -v "'" "$list" | LC_ALL=C sort -u > "$WORK/lists/$lang"
done
# words in exactly one list
LC_ALL=C sort "$WORK"/lists/* | uniq -d > "$WORK/shared"
: > "$WORK/words.tsv"
for lang in en de fr it es; do
  LC_ALL=C comm -23 "$WORK/lists/$lang" "$WORK/shared" |
    shuf -n "$WORDS" --random-source=<(yes "lstmd $lang") | sed "s/^/$lang\t/" >> "$WORK/words.tsv"
done
"$LSTMD" prepare classify --input "$WORK/words.tsv" --out prepared/language_id --val-fraction 0.1
rm -rf runs/language_id # a rerun of the example starts over (lstmd train refuses a used run dir)
# shellcheck disable=SC2086
"$LSTMD" train --config "$HERE/language_id.ini" ${TRAIN_ARGS:-}
"$LSTMD" eval --checkpoint runs/language_id/latest.safetensors --data prepared/language_id
printf 'house\nHaus\nmaison\ncasa\nstrada\nStraße\nfenêtre\nventana\n' > "$WORK/try.txt"
paste "$WORK/try.txt" <("$LSTMD" classify --checkpoint runs/language_id/latest.safetensors \
                          --input "$WORK/try.txt")
