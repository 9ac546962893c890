# The TUN addon (src/tun/native/tun.cc) and the pinned-map file mapping (pin.cc): node-addon-api with C++ exceptions off, so an error in
# the addon is a JS exception or a counter, never an abort. Linux only (TUN ioctls).
# liburing (Debian's liburing-dev, scripts/bootstrap.sh installs it) is linked statically when its header and archive are there,
# so the addon needs nothing more at run time; without it (or with KUBETUN_NO_URING=1 at build time) tun.cc writes batches with one
# write() per packet. The choice is uringBuilt in the addon's exports.
{
  "targets": [
    {
      "target_name": "kubetun_tun",
      "sources": ["src/tun/native/tun.cc", "src/tun/native/pin.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_DISABLE_CPP_EXCEPTIONS", "NAPI_VERSION=8"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
      "conditions": [
        ["<!(node -p \"const {existsSync: e} = require('fs'); process.env.KUBETUN_NO_URING !== '1' && e('/usr/include/liburing.h') && ['/usr/lib/x86_64-linux-gnu', '/usr/lib/aarch64-linux-gnu', '/usr/lib64', '/usr/lib'].some((d) => e(d + '/liburing.a')) ? 1 : 0\")==1", {
          "defines": ["KUBETUN_HAVE_LIBURING"],
          "libraries": ["-l:liburing.a"]
        }]
      ]
    }
  ]
}
