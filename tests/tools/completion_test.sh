#!/usr/bin/env bash
# The bash completion (tools/usrtrace/usrtrace.bash-completion) as a shell
# user meets it: the completion function run on command lines as readline
# splits them, in a bash with bash-completion loaded, against a live traced
# process (cli_target) and the command itself.
#
#   completion_test.sh USRTRACE COMPLETION_SCRIPT TARGET SYSTEM EVENT
#
# TARGET prints "ready PID" and lives until its input ends; it has the
# event SYSTEM:EVENT (cli_target: clitest tick).
# The package test (tests/package/package_test.sh) runs it again on the
# installed files. Exits 77 (skipped) without bash-completion
# (apt-get install bash-completion). Each check names itself.
set -uo pipefail

usrtrace=$1
script=$2
target=$3
sys=$4
event=$5
[[ -r /usr/share/bash-completion/bash_completion ]] ||
  { echo "completion_test: SKIP: no /usr/share/bash-completion/bash_completion"; exit 77; }

# The command is typed as `usrtrace`, found on PATH, as a user has it.
bindir=$(mktemp -d "${TMPDIR:-/tmp}/usrtrace-compl.XXXXXX")
ln -s "$(readlink -f "$usrtrace")" "$bindir/usrtrace"
export PATH="$bindir:$PATH"

coproc TARGET { exec "$target"; }
cleanup() {
  [[ -n ${TARGET_PID:-} ]] && kill "$TARGET_PID" 2>/dev/null
  rm -rf "$bindir"
}
trap cleanup EXIT
read -r ready pid <&"${TARGET[0]}"
[[ $ready == ready && $pid =~ ^[0-9]+$ ]] || { echo "$target did not start"; exit 1; }

# bash_completion expects an interactive-ish shell's settings.
set +u
# shellcheck disable=SC1091
source /usr/share/bash-completion/bash_completion
# shellcheck disable=SC1090
source "$script"

failures=0
# complete LINE: COMPREPLY for the cursor at LINE's end. Words are split as
# readline splits them (COMP_WORDBREAKS: blanks, and ':' as a word of its
# own), which is what the completion function must put back together.
complete_line() {
  local line=$1
  COMP_LINE=$line
  COMP_POINT=${#line}
  local spaced=${line//:/ : }
  read -r -a COMP_WORDS <<<"$spaced"
  [[ $line == *" " || $line == *":" ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _usrtrace usrtrace "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
}
# expect NAME LINE WORD...: each WORD is among the completions of LINE.
# offers WORD: whether COMPREPLY holds it. A loop, not `printf | grep -q`:
# under pipefail, grep -q leaving at the first match can make printf die of
# SIGPIPE, and the pipeline fail although the word is there.
offers() {
  local c
  for c in "${COMPREPLY[@]}"; do [[ $c == "$1" ]] && return 0; done
  return 1
}
expect() {
  local name=$1 line=$2 w
  shift 2
  complete_line "$line"
  for w in "$@"; do
    if ! offers "$w"; then
      echo "FAIL $name: '$line' does not offer '$w' (got: ${COMPREPLY[*]})"
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok   $name"
}
# expect_only NAME LINE WORD...: exactly these completions, in any order.
expect_only() {
  local name=$1 line=$2
  shift 2
  complete_line "$line"
  local got want
  got=$(printf '%s\n' "${COMPREPLY[@]}" | sort)
  want=$(printf '%s\n' "$@" | sort)
  if [[ $got != "$want" ]]; then
    echo "FAIL $name: '$line' offers '${COMPREPLY[*]}', not '$*'"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

# expect_def NAME PREFIX DEF WORD...: the cursor at the end of an open-quoted
# probe definition DEF after PREFIX. Readline keeps a quoted word whole (its
# blanks and colons do not split it) and replaces it from its quote: each
# WORD, quote included, is among the completions.
expect_def() {
  local name=$1 prefix=$2 def=$3 w
  shift 3
  local line="$prefix '$def"
  COMP_LINE=$line
  COMP_POINT=${#line}
  read -r -a COMP_WORDS <<<"$prefix"
  COMP_WORDS+=("'$def")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  _usrtrace usrtrace "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
  for w in "$@"; do
    if ! offers "'$w"; then
      echo "FAIL $name: '$line' does not offer \"'$w\" (got: ${COMPREPLY[*]:0:5})"
      failures=$((failures + 1))
      return
    fi
  done
  echo "ok   $name"
}

expect_only "subcommands by prefix" "usrtrace re" record recover report reset restart
expect "every subcommand" "usrtrace " record report start stop extract list mount
expect_only "long flags of record" "usrtrace record --comp" --compression --compress
expect "short flags of stop" "usrtrace stop -" -P -B -t -a
expect "PIDs of traceable processes" "usrtrace stop -P " "$pid"
# readline replaces only what follows the ':' (its own word): "tick" makes
# "clitest:t" read clitest:tick.
expect_only "events of the process" "usrtrace start -P $pid -e $sys:${event:0:1}" "$event"
expect "an event's system" "usrtrace start -P $pid -e ${sys:0:3}" "$sys" "$sys:$event"
expect "tracers of the process" "usrtrace start -P $pid -p func" function function_graph
expect "options, either way" "usrtrace start -P $pid -O " nofunc_stack_trace func_stack_trace
expect "a command after --" "usrtrace record -p function -- bas" bash
expect "long flags, trace-cmd's and uftrace's" "usrtrace record --" --event --trigger --negate --stacktrace \
  --cpumask --filter --notrace --depth --time-filter --quiet
expect "events after --event, the process by --pid" "usrtrace start --pid $pid --event ${sys:0:3}" "$sys"
expect_only "clocks of the process" "usrtrace start -P $pid -C x86" x86-tsc
# Probe definitions: the process's USDT probes (libstdc++'s, a C++ target
# has it loaded), its program's functions, a library's by PATH:.
expect_def "USDT probes of the process" "usrtrace probe -P $pid" "p:x/y %libstdcxx:th" "p:x/y %libstdcxx:throw"
expect_def "functions of the program" "usrtrace probe -P $pid" "p:x/y mai" "p:x/y main"
libstdcxx=$(awk '$6 ~ /libstdc\+\+/ { print $6; exit }' "/proc/$pid/maps")
expect_def "functions of a library" "usrtrace probe -P $pid" "r:x/y $libstdcxx:__cxa_thr" \
  "r:x/y $libstdcxx:__cxa_throw"
expect_def "after --probe" "usrtrace start -P $pid --probe" "p:x/y ma" "p:x/y main"
complete -p usrtrace >/dev/null 2>&1 || { echo "FAIL: 'complete -p usrtrace' has nothing"; failures=$((failures + 1)); }

if ((failures)); then
  echo "completion_test: $failures failed"
  exit 1
fi
echo "completion_test: all passed"
