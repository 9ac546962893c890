#!/usr/bin/env bash
# Builds the kubetun/debian12 Vagrant box for libvirt from Debian packages, here, and adds it
# to Vagrant: no box is downloaded (Vagrant Cloud is not needed, nor reachable in CI).
#
#   debootstrap bookworm (lab/vagrant/box/packages) ─▶ rootfs, cached by the package list
#   + the host's Node 20 (Debian 12 ships 18), the npm dependencies (npm ci --omit=dev),
#     a vagrant user with Vagrant's insecure key, /etc/network/interfaces, module list
#   ─▶ mkfs.ext4 -d (no loop device, no mount) ─▶ qcow2 ─▶ .box (+ kernel, initrd, Vagrantfile)
#   ─▶ vagrant box add kubetun/debian12
#
# Every input (this script, lab/vagrant/box/*, package-lock.json, the host's Node) goes into one
# hash; when the box Vagrant has was built from the same hash, nothing is done (seconds).
#
#   bash scripts/box-build.sh [--force]     as root; KUBETUN_BOX_CACHE (default /var/cache/kubetun-box)
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
box_name=kubetun/debian12
cache=${KUBETUN_BOX_CACHE:-/var/cache/kubetun-box}
mirror=${KUBETUN_DEBIAN_MIRROR:-http://deb.debian.org/debian}
size=${KUBETUN_BOX_SIZE:-8G}
force=${1:-}
t0=$(date +%s)
say() { printf 'box-build [%4ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot)"
for c in debootstrap mkfs.ext4 qemu-img vagrant node npm; do
  command -v "$c" >/dev/null || die "$c missing: bash scripts/bootstrap.sh --vm installs it"
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || die "the box gets this machine's Node, which is $(node -v): need >= 20"
dpkg -s nodejs >/dev/null 2>&1 || die "the box copies the files of the nodejs package: not installed"

# What the addon is built from: node.sh computes the same to know whether the box's copy fits.
addon_hash() { cat binding.gyp src/tun/native/*.cc | sha256sum | cut -c1-16; }

packages=$(grep -v '^#' lab/vagrant/box/packages | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
rootfs_key=$(printf '%s\n' "$packages" "$mirror" | sha256sum | cut -c1-12)
key=$({
  echo "$rootfs_key" "$size"
  cat "$0" lab/vagrant/box/* package-lock.json scripts/build-addon.mjs
  addon_hash
  node -v
  sha256sum "$(command -v node)"
} | sha256sum | cut -c1-16)
box_dir_installed=${VAGRANT_HOME:-$HOME/.vagrant.d}/boxes/${box_name//\//-VAGRANTSLASH-}/0/libvirt
if [ "$force" != --force ] && [ "$(cat "$box_dir_installed/kubetun-box-key" 2>/dev/null)" = "$key" ]; then
  say "$box_name is up to date (inputs $key); --force rebuilds it"
  exit 0
fi
mkdir -p "$cache"

# 1. The Debian root file system (the slow part: minutes), kept while the package list holds.
rootfs=$cache/rootfs-$rootfs_key
if [ ! -f "$rootfs/.kubetun-done" ]; then
  rm -rf "$rootfs"
  say "debootstrap bookworm from $mirror into $rootfs (minutes; log: $rootfs.log)"
  debootstrap --variant=minbase --include="${packages// /,}" bookworm "$rootfs" "$mirror" \
    >"$rootfs.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null; do
    sleep 15
    say "debootstrap: $(grep -c '^I: \(Retrieving\|Validating\)' "$rootfs.log" 2>/dev/null) downloads, now: $(tail -1 "$rootfs.log" | cut -c1-60)"
  done
  wait $pid || { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log above: $rootfs.log)"; }
  chroot "$rootfs" apt-get clean
  touch "$rootfs/.kubetun-done"
fi
say "rootfs ready: $rootfs ($(du -sh "$rootfs" | cut -f1))"

# 2. The npm dependencies (production only), installed on this machine from its npm cache.
modules=$cache/modules-$(sha256sum package-lock.json | cut -c1-12)
if [ ! -f "$modules/.kubetun-done" ]; then
  say "npm ci --omit=dev into $modules"
  rm -rf "$modules" && mkdir -p "$modules"
  cp package.json package-lock.json "$modules/"
  (cd "$modules" && npm ci --omit=dev --ignore-scripts --no-fund --no-audit --loglevel=error)
  touch "$modules/.kubetun-done"
fi

# 3. This box's tree: a copy of the rootfs, customised.
work=$cache/work-$key
rm -rf "$work" "$cache"/work-* && mkdir -p "$work"
say "customising a copy of the rootfs"
cp -a "$rootfs" "$work/root"
r=$work/root
rm -f "$r/.kubetun-done"
# Node: the files of this machine's nodejs package (Debian 12's own is 18; kubetun needs 20).
dpkg -L nodejs | while read -r f; do if [ -f "$f" ] || [ -L "$f" ]; then echo "${f#/}"; fi; done |
  tar -C / -cf - --no-recursion -T - | tar -C "$r" -xf -
# npm as it is on this machine (it may have been updated past the package's own files).
tar -C / -cf - usr/lib/node_modules/npm | tar -C "$r" -xf -
chroot "$r" node -v >/dev/null || die "the copied Node does not run in the box"
mkdir -p "$r/opt/kubetun-modules"
cp -a "$modules/node_modules" "$r/opt/kubetun-modules/"
cp package-lock.json "$r/opt/kubetun-modules/"
# The TUN addon, compiled here on this machine (Debian 12, the Node the box gets: the same
# userland, so the same binary loads in the guest — checked below), at native speed and without
# a compiler in the box; node.sh uses it while binding.gyp and the C++ source are unchanged
# (same hash), and a change to them changes this box's inputs, so the box is rebuilt.
ab=$work/addon-src
mkdir -p "$ab/src/tun/native" "$ab/scripts"
cp binding.gyp "$ab/" && cp src/tun/native/*.cc "$ab/src/tun/native/" && cp scripts/build-addon.mjs "$ab/scripts/"
ln -s "$repo/node_modules" "$ab/node_modules"
say "building the TUN addon for the box"
if ! (cd "$ab" && node scripts/build-addon.mjs) >"$work/addon.log" 2>&1; then
  tail -20 "$work/addon.log" >&2
  die "the addon did not build (log: $work/addon.log; needs g++, make, python3: scripts/bootstrap.sh)"
fi
cp "$ab/build/Release/kubetun_tun.node" "$r/opt/kubetun-modules/kubetun_tun.node"
addon_hash >"$r/opt/kubetun-modules/kubetun_tun.hash"
chroot "$r" node -e "require('/opt/kubetun-modules/kubetun_tun.node')" ||
  die "the addon built here does not load in the box (is this machine Debian 12?)"
rm -rf "$ab" "$r/tmp/.cache" "$r/tmp/.npm"
# What no lab node reads: documentation, manual pages, translations (a smaller image uploads
# into libvirt's pool and boots faster).
rm -rf "$r"/usr/share/doc/* "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/*
# Vagrant's user, its well-known insecure key (Vagrant replaces it at the first `vagrant up`).
chroot "$r" useradd -m -s /bin/bash vagrant 2>/dev/null || true
install -d -m 700 -o 1000 -g 1000 "$r/home/vagrant/.ssh"
insecure_key=$(ls /usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub /opt/vagrant/embedded/gems/gems/vagrant-*/keys/vagrant.pub 2>/dev/null | head -1 || true)
[ -n "$insecure_key" ] || die "Vagrant's insecure public key (keys/vagrant.pub) not found"
install -m 600 -o 1000 -g 1000 "$insecure_key" "$r/home/vagrant/.ssh/authorized_keys"
echo 'vagrant ALL=(ALL) NOPASSWD: ALL' >"$r/etc/sudoers.d/vagrant" && chmod 440 "$r/etc/sudoers.d/vagrant"
echo 'root:vagrant' | chroot "$r" chpasswd
echo 'UseDNS no' >"$r/etc/ssh/sshd_config.d/kubetun.conf"
install -m 644 lab/vagrant/box/interfaces "$r/etc/network/interfaces"
echo kubetun-box >"$r/etc/hostname"
echo '/dev/vda / ext4 rw,relatime 0 1' >"$r/etc/fstab"
printf '%s\n' tun sch_ingress cls_u32 act_mirred >"$r/etc/modules-load.d/kubetun.conf"
# Under emulation every unit costs seconds: none of the periodic housekeeping, no console
# logins (Vagrant comes in by SSH; the serial console is a log).
for u in e2scrub_reap.service e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer \
  man-db.timer fstrim.timer logrotate.timer dpkg-db-backup.timer \
  serial-getty@ttyS0.service getty@tty1.service; do
  ln -sf /dev/null "$r/etc/systemd/system/$u"
done
kernel=$(ls "$r"/boot/vmlinuz-* | sort -V | tail -1)
initrd=$(ls "$r"/boot/initrd.img-* | sort -V | tail -1)
[ -f "$kernel" ] && [ -f "$initrd" ] || die "no kernel or initrd in the rootfs ($r/boot)"

# 4. Image and box.
say "mkfs.ext4 -d: $size file system image"
out=$work/box && mkdir -p "$out"
mkfs.ext4 -q -F -L kubetun -d "$r" "$work/root.raw" "$size"
say "qemu-img convert to qcow2"
qemu-img convert -O qcow2 "$work/root.raw" "$out/box.img"
rm -f "$work/root.raw"
cp "$kernel" "$out/vmlinuz" && cp "$initrd" "$out/initrd.img"
cp lab/vagrant/box/Vagrantfile "$out/Vagrantfile"
gib=$(( $(numfmt --from=iec "$size") / 1073741824 ))
printf '{"provider":"libvirt","format":"qcow2","virtual_size":%s}\n' "$gib" >"$out/metadata.json"
echo "$key" >"$out/kubetun-box-key"
say "tar the box"
tar -C "$out" -cf "$work/kubetun-debian12.box" .
rm -rf "$r" "$out"

# 5. Into Vagrant. vagrant-libvirt uploads the box into libvirt's pool once per box file (the
#    volume's name carries the file's timestamp); copies of earlier builds are removed here
#    when no VM is defined that could still be based on one.
say "vagrant box add $box_name"
vagrant box add --force --name "$box_name" "$work/kubetun-debian12.box" >/dev/null
lv() { virsh -c qemu:///system "$@" 2>/dev/null; }
if lv pool-info default >/dev/null && [ -z "$(lv list --all --name | grep .)" ]; then
  for vol in $(lv vol-list default | awk '{print $1}' | grep "^${box_name//\//-VAGRANTSLASH-}_vagrant_box_image_"); do
    lv vol-delete --pool default "$vol" >/dev/null && say "removed libvirt's copy of an earlier build: $vol"
  done
fi
rm -f "$work/kubetun-debian12.box"
say "done: $box_name (inputs $key) in $(($(date +%s) - t0)) s"
