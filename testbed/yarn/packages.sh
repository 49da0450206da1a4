#!/usr/bin/env bash
# Prepare the local YARN testbed: check that java, javac and mvn exist, resolve the Hadoop
# jars (pom.xml) into ${STRATCTL_YARN_CACHE:-~/.cache/stratctl/yarn}/lib and compile
# src/MiniYarn.java into .../classes. Idempotent: when the cache matches pom.xml and the
# source it does nothing (up.sh runs it every time). Needs Maven Central the first time
# (about 115 MB of jars, into ~/.m2 and the cache). <cache>/am-lib gets Hadoop's
# distributed-shell application master and the few jars it needs beside <cache>/lib.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

missing=()
for cmd in java javac mvn curl flock; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
if (( ${#missing[@]} )); then
  yl_log "missing: ${missing[*]} (need a JDK 17+ with javac, Maven 3, curl and flock)"
  exit 1
fi
jver=$(java -version 2>&1 | awk -F'"' '/version/ {print $2; exit}')
[[ ${jver%%.*} =~ ^[0-9]+$ && ${jver%%.*} -ge 11 ]] || { yl_log "java $jver is too old (Hadoop 3.5 needs 11+; tested with 17)"; exit 1; }

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9

# Only for application masters (<cache>/am-lib), kept off the cluster JVM's classpath.
AM_ARTIFACTS=hadoop-yarn-applications-distributedshell,commons-cli,commons-lang3,jersey-client,jersey-core,jsr311-api
pom_sum=$(sha256sum "$YARN_SRC/pom.xml" | awk '{print $1}')
if [[ $(cat "$LIB/.pom.sha256" 2>/dev/null) != "$pom_sum" ]]; then
  yl_log "resolving the jars of pom.xml into $LIB (Maven Central, ~115 MB the first time)"
  rm -rf "$LIB.tmp" "$AM_LIB.tmp"
  mvn_copy() {
    # (-q still prints bare colour resets: strip them)
    mvn -B -q -Dstyle.color=never -f "$YARN_SRC/pom.xml" dependency:copy-dependencies "$@" 2>&1 \
      | sed -e 's/\x1b\[[0-9;]*m//g' | { grep -v '^$' || true; } >&2 || {
      yl_log "mvn could not resolve the jars (is Maven Central reachable? see the output above)"
      exit 1
    }
  }
  mvn_copy -DoutputDirectory="$LIB.tmp" -DexcludeArtifactIds="$AM_ARTIFACTS"
  mvn_copy -DoutputDirectory="$AM_LIB.tmp" -DincludeArtifactIds="$AM_ARTIFACTS"
  rm -rf "$LIB" "$AM_LIB" "$CLASSES"
  mv "$AM_LIB.tmp" "$AM_LIB"
  mv "$LIB.tmp" "$LIB"
  echo "$pom_sum" >"$LIB/.pom.sha256"
fi

src_sum=$(cat "$LIB/.pom.sha256" "$YARN_SRC/src/MiniYarn.java" | sha256sum | awk '{print $1}')
if [[ $(cat "$CLASSES/.src.sha256" 2>/dev/null) != "$src_sum" ]]; then
  yl_log "compiling src/MiniYarn.java into $CLASSES"
  rm -rf "$CLASSES"
  mkdir -p "$CLASSES"
  javac -nowarn -d "$CLASSES" -cp "$LIB/*" "$YARN_SRC/src/MiniYarn.java" >&2
  echo "$src_sum" >"$CLASSES/.src.sha256"
fi
