#!/usr/bin/env bash
# README's example is examples/example_two_sided.c, byte for byte (the
# suite compiles and runs the file, so the README's copy works too).
#   readme_example_test.sh <README.md> <example_two_sided.c>
set -euo pipefail
readme=$1 example=$2
got=$(awk '/^## Example/{e=1; next} /^## /{e=0} e && /^```c$/{c=1; next} c && /^```$/{exit} c' "$readme")
if [ "$got" != "$(cat "$example")" ]; then
    echo "README's example differs from $example:"
    diff <(echo "$got") "$example" || true
    exit 1
fi
echo "README's example is $example"
