#!/usr/bin/env bash
# Build stratctl's gang application master (src/main/java/io/stratctl/yarn/: GangMaster.java
# and the rendezvous contract it gives each container, Rendezvous.java) into
# ${STRATCTL_YARN_CACHE:-~/.cache/stratctl/yarn}/am/stratctl-yarn-am.jar, compiled with javac
# against Hadoop's client jars (hadoop-client-api/-runtime 3.5.0, resolved from Maven Central
# by testbed/yarn/packages.sh into <cache>/lib, run here when they are missing).
# Idempotent: does nothing when the jar matches the source. The last line of output is the
# jar's path. The jar holds only stratctl's classes: on a cluster, the AM's classpath is the
# cluster's own Hadoop (yarn.application.classpath), and the jar goes where every
# NodeManager reads it (the study's yarn.am_jar).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${STRATCTL_YARN_CACHE:-$HOME/.cache/stratctl/yarn}
LIB=$CACHE/lib
OUT=$CACHE/am
JAR=$OUT/stratctl-yarn-am.jar
SRC=("$HERE"/src/main/java/io/stratctl/yarn/*.java)

for cmd in javac jar; do
  command -v "$cmd" >/dev/null || { echo "yarn-am: $cmd is missing (a JDK 11+ is needed)" >&2; exit 1; }
done
[[ -e $LIB/hadoop-client-api-3.5.0.jar ]] || bash "$HERE/../testbed/yarn/packages.sh"
sum=$(cat "${SRC[@]}" "$LIB/.pom.sha256" 2>/dev/null | sha256sum | awk '{print $1}')
if [[ ! -s $JAR || $(cat "$OUT/.src.sha256" 2>/dev/null) != "$sum" ]]; then
  echo "yarn-am: compiling ${#SRC[@]} sources into $JAR" >&2
  mkdir -p "$OUT"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  javac -nowarn --release 11 -d "$tmp/classes" -cp "$LIB/*" "${SRC[@]}" 2>&1 | { grep -v '^Note:' || true; } >&2
  jar cf "$tmp/am.jar" -C "$tmp/classes" .
  mv -f "$tmp/am.jar" "$JAR"
  echo "$sum" >"$OUT/.src.sha256"
fi
echo "$JAR"
