# Sourced by node.sh and client.sh: names this machine (the Vagrantfile sets no vm.hostname —
# Vagrant's Debian capability costs a minute of round trips and hostnamectl under emulation).
set_hostname() {
  local name=$1
  [ "$(hostname)" = "$name" ] && return
  echo "$name" >/etc/hostname
  hostname "$name"
  sed -i '/^127\.0\.1\.1[[:space:]]/d' /etc/hosts
  echo "127.0.1.1 $name" >>/etc/hosts
}
