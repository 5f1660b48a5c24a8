#!/bin/sh
# Make Debian's Fashion-MNIST available at /usr/share/datasets/fashion-mnist.
# Installs the package `dataset-fashion-mnist` when it is missing and we run as
# root with apt; otherwise explains how to get the data and which path to pass.
dir=/usr/share/datasets/fashion-mnist
if [ -f "$dir/t10k-images-idx3-ubyte.gz" ]; then
    exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Debian's dataset-fashion-mnist (Fashion-MNIST, 30 MB) ..."
    export DEBIAN_FRONTEND=noninteractive
    if apt-get update -q >/dev/null && apt-get install -y -q dataset-fashion-mnist >/dev/null; then
        exit 0
    fi
    echo "apt-get could not install dataset-fashion-mnist." >&2
fi
cat >&2 <<MSG
Fashion-MNIST was not found in $dir.
Get it with one of:
  sudo apt-get install dataset-fashion-mnist     (Debian, Ubuntu)
  or download the four *-ubyte.gz files of https://github.com/zalandoresearch/fashion-mnist
  into a folder and pass that folder with --data-dir (e.g. uncurated demo --data-dir DIR).
Tests that need the real files are skipped until then.
MSG
exit 0
