#!/bin/sh
# Fails (TAP) when protocol/, gateway/ or kernel-host/ call a banned function:
# sprintf, strcpy, strcat, gets, strtok, atoi, system, popen (STYLE.md §8).
# A call is the whole word followed by "(", so snprintf, vsnprintf, strtok_r
# and a member named .system do not match; comments are not exempt, so a
# banned name in prose must not be written as a call.
set -u

srcdir=${GLOVEBOX_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
banned='sprintf|strcpy|strcat|gets|strtok|atoi|system|popen'
# Not preceded by an identifier character, "." or "->"; then optional blanks and "(".
pattern="(^|[^A-Za-z0-9_.>])($banned)[[:space:]]*\\("

echo "1..2"

files=$(cd "$srcdir" && find protocol gateway kernel-host -name '*.[ch]' 2>/dev/null | sort)
if [ -z "$files" ]; then
        echo "not ok 1 - found sources to check under $srcdir"
else
        echo "ok 1 - found $(echo "$files" | wc -l) sources to check under $srcdir"
fi

hits=$(cd "$srcdir" && echo "$files" | xargs grep -nE "$pattern" /dev/null 2>/dev/null)
if [ -n "$hits" ]; then
        echo "not ok 2 - no banned function is called"
        echo "$hits" | sed 's/^/#   /'
        exit 1
fi
echo "ok 2 - no banned function is called"
