// kubetun_tun: the smallest native piece kubetun needs — a Linux TUN fd driven by libuv.
//
// Why native at all: Node has no API for ioctl(TUNSETIFF), and fs.read on a character device
// ties up a libuv thread-pool thread per read. Here the fd is non-blocking and watched by a
// uv_poll handle on the main loop; when it is readable we drain it with read() until EAGAIN (or
// the batch limit) into ONE buffer that JS handed over once, record offsets and lengths in two
// Uint32Arrays JS also handed over, and make ONE JS call per batch with the packet count. Writes
// are batched the same way: one N-API call writes N packets. Nothing here allocates per packet,
// and no packet error aborts: the kernel's EINVAL for a non-IP packet is counted and skipped.
//
// Exports:
//   open(name, flags) -> { fd, name }       flags: 1 multi-queue, 2 vnet header, 4 persist
//   setOffload(fd, tunFlags) -> errno       TUNSETOFFLOAD; 0 when the kernel took every bit
//   setPersist(fd, on), setMtu(ifname, mtu), setTxQueueLen(ifname, n), setUp(ifname, up)
//   mapFile(path, offset, length) -> ArrayBuffer   pinned maps (pin.cc)
//
// With the vnet header, TUNSETVNETLE makes its fields little-endian on every host (a legacy
// TUN's are host-endian), so src/wire/virtio.ts has one layout to read.
//   class Queue(fd, rxBuf: Uint8Array, offs: Uint32Array, lens: Uint32Array,
//               stats: Float64Array, batchMax, onBatch(n, errno), uring = true)
//     start(), stop(), writeBatch(buf, offs, lens, n) -> written, write(buf, off, len) -> bool,
//     txUring() -> 0 batches go through io_uring, -1 not asked for or not built, else the errno
//     of io_uring_queue_init; close()
//   uringBuilt: whether the addon was built with liburing
#include <napi.h>
#include <uv.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#ifdef KUBETUN_HAVE_LIBURING
#include <liburing.h>
#endif

namespace kubetun_pin {
void Init(Napi::Env env, Napi::Object exports);  // pin.cc: mapFile
}

namespace {

// Indexes into the stats Float64Array shared with JS (src/tun/tun.ts keeps the same order).
enum Stat {
  RX_PACKETS,
  RX_BYTES,
  RX_BATCHES,
  RX_ERRORS,
  TX_PACKETS,
  TX_BYTES,
  TX_ERRORS,
  TX_EINVAL,
  TX_EAGAIN,
  TX_BAD_SLICE,
  TX_SYSCALLS,
  STAT_COUNT
};

// Room a single read must be offered so the kernel never truncates a packet: a TUN read
// returns at most one 64 KiB packet, plus a virtio_net_hdr when IFF_VNET_HDR is on.
constexpr size_t kReadRoom = 65536 + 64;
// Packets start on 8-byte boundaries inside the shared buffer (cheap, keeps headers aligned).
constexpr size_t kAlign = 8;

constexpr uint32_t kOpenMultiQueue = 1;
constexpr uint32_t kOpenVnetHdr = 2;
constexpr uint32_t kOpenPersist = 4;

#ifdef KUBETUN_HAVE_LIBURING
// SQEs per io_uring_enter at most (a longer batch takes several): 64 KiB of ring memory.
constexpr unsigned kRingEntries = 256;
#endif

Napi::Error ErrnoError(Napi::Env env, const std::string& what, int err) {
  Napi::Error e = Napi::Error::New(env, what + ": " + strerror(err));
  e.Set("code", Napi::String::New(env, uv_err_name(-err)));
  e.Set("errno", Napi::Number::New(env, err));
  return e;
}

Napi::Value Open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString() || !info[1].IsNumber()) {
    Napi::TypeError::New(env, "open(name: string, flags: number)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  std::string name = info[0].As<Napi::String>().Utf8Value();
  uint32_t flags = info[1].As<Napi::Number>().Uint32Value();
  if (name.size() >= IFNAMSIZ) {
    Napi::Error::New(env, "interface name too long: " + name).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    ErrnoError(env, "open /dev/net/tun", errno).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  if (flags & kOpenMultiQueue) ifr.ifr_flags |= IFF_MULTI_QUEUE;
  if (flags & kOpenVnetHdr) ifr.ifr_flags |= IFF_VNET_HDR;
  memcpy(ifr.ifr_name, name.data(), name.size());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    int err = errno;
    ::close(fd);
    ErrnoError(env, "TUNSETIFF " + name, err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int le = 1;
  if ((flags & kOpenVnetHdr) && ioctl(fd, TUNSETVNETLE, &le) < 0) {
    int err = errno;
    ::close(fd);
    ErrnoError(env, "TUNSETVNETLE " + name, err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if ((flags & kOpenPersist) && ioctl(fd, TUNSETPERSIST, 1) < 0) {
    int err = errno;
    ::close(fd);
    ErrnoError(env, "TUNSETPERSIST " + name, err).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("fd", Napi::Number::New(env, fd));
  out.Set("name", Napi::String::New(env, ifr.ifr_name));
  return out;
}

// Probing is the caller's loop: tun.c answers EINVAL for any bit it does not know (or, for USO,
// gets only half of), so an error is a value here, not an exception.
Napi::Value SetOffload(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsNumber() || !info[1].IsNumber()) {
    Napi::TypeError::New(env, "setOffload(fd: number, flags: number)").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  int fd = info[0].As<Napi::Number>().Int32Value();
  unsigned long flags = info[1].As<Napi::Number>().Uint32Value();
  int rc = ioctl(fd, TUNSETOFFLOAD, flags) < 0 ? errno : 0;
  return Napi::Number::New(env, rc);
}

Napi::Value SetPersist(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int fd = info[0].As<Napi::Number>().Int32Value();
  bool on = info[1].ToBoolean().Value();
  if (ioctl(fd, TUNSETPERSIST, on ? 1 : 0) < 0) {
    ErrnoError(env, "TUNSETPERSIST", errno).ThrowAsJavaScriptException();
  }
  return env.Undefined();
}

// SIOCSIFMTU / SIOCSIFFLAGS go through any socket of the caller's network namespace.
bool IfIoctl(Napi::Env env, const Napi::CallbackInfo& info, unsigned long req, struct ifreq* ifr) {
  std::string name = info[0].As<Napi::String>().Utf8Value();
  if (name.size() >= IFNAMSIZ) {
    Napi::Error::New(env, "interface name too long: " + name).ThrowAsJavaScriptException();
    return false;
  }
  memcpy(ifr->ifr_name, name.data(), name.size());
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    ErrnoError(env, "socket", errno).ThrowAsJavaScriptException();
    return false;
  }
  bool ok = ioctl(s, req, ifr) == 0;
  int err = errno;
  ::close(s);
  if (!ok) ErrnoError(env, "ioctl " + name, err).ThrowAsJavaScriptException();
  return ok;
}

// An int setting of a device by name: fill puts the value into its field of the ifreq.
template <typename Fill>
Napi::Value IfSetInt(const Napi::CallbackInfo& info, unsigned long req, Fill fill) {
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  fill(ifr, info[1].As<Napi::Number>().Int32Value());
  IfIoctl(info.Env(), info, req, &ifr);
  return info.Env().Undefined();
}

Napi::Value SetMtu(const Napi::CallbackInfo& info) {
  return IfSetInt(info, SIOCSIFMTU, [](struct ifreq& r, int v) { r.ifr_mtu = v; });
}

// The device's txqueuelen: for a TUN the ring of packets the kernel holds for this reader.
Napi::Value SetTxQueueLen(const Napi::CallbackInfo& info) {
  return IfSetInt(info, SIOCSIFTXQLEN, [](struct ifreq& r, int v) { r.ifr_qlen = v; });
}

Napi::Value SetUp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  struct ifreq ifr;
  memset(&ifr, 0, sizeof ifr);
  if (!IfIoctl(env, info, SIOCGIFFLAGS, &ifr)) return env.Undefined();
  if (info[1].ToBoolean().Value()) {
    ifr.ifr_flags |= IFF_UP;
  } else {
    ifr.ifr_flags &= ~IFF_UP;
  }
  IfIoctl(env, info, SIOCSIFFLAGS, &ifr);
  return env.Undefined();
}

class Queue : public Napi::ObjectWrap<Queue> {
 public:
  static Napi::Function Init(Napi::Env env) {
    return DefineClass(env, "Queue",
                       {InstanceMethod<&Queue::Start>("start"),
                        InstanceMethod<&Queue::Stop>("stop"),
                        InstanceMethod<&Queue::WriteBatch>("writeBatch"),
                        InstanceMethod<&Queue::Write>("write"),
                        InstanceMethod<&Queue::TxUring>("txUring"),
                        InstanceMethod<&Queue::Close>("close")});
  }

  explicit Queue(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Queue>(info) {
    Napi::Env env = info.Env();
    if (info.Length() < 7 || !info[0].IsNumber() || !info[1].IsTypedArray() ||
        !info[2].IsTypedArray() || !info[3].IsTypedArray() || !info[4].IsTypedArray() ||
        !info[5].IsNumber() || !info[6].IsFunction()) {
      Napi::TypeError::New(env, "Queue(fd, rxBuf, offs, lens, stats, batchMax, onBatch)")
          .ThrowAsJavaScriptException();
      return;
    }
    Napi::Uint8Array rx = info[1].As<Napi::Uint8Array>();
    Napi::Uint32Array offs = info[2].As<Napi::Uint32Array>();
    Napi::Uint32Array lens = info[3].As<Napi::Uint32Array>();
    Napi::Float64Array stats = info[4].As<Napi::Float64Array>();
    uint32_t batchMax = info[5].As<Napi::Number>().Uint32Value();
    if (rx.ByteLength() < kReadRoom || batchMax == 0 || offs.ElementLength() < batchMax ||
        lens.ElementLength() < batchMax || stats.ElementLength() < STAT_COUNT) {
      Napi::RangeError::New(env, "Queue: rxBuf >= 65600 bytes, offs/lens >= batchMax, stats")
          .ThrowAsJavaScriptException();
      return;
    }
    // Strong references keep the shared arrays alive (and their data pointers valid) for the
    // life of the queue; JS must not transfer or detach them.
    rxRef_ = Napi::Persistent(rx);
    offsRef_ = Napi::Persistent(offs);
    lensRef_ = Napi::Persistent(lens);
    statsRef_ = Napi::Persistent(stats);
    cb_ = Napi::Persistent(info[6].As<Napi::Function>());
    rx_ = rx.Data();
    rxCap_ = rx.ByteLength();
    offs_ = offs.Data();
    lens_ = lens.Data();
    stats_ = stats.Data();
    batchMax_ = batchMax;
    fd_ = info[0].As<Napi::Number>().Int32Value();
    if (info.Length() < 8 || info[7].ToBoolean().Value()) InitRing();
    asyncCtx_ = std::make_unique<Napi::AsyncContext>(env, "kubetun:tun");
    uv_loop_t* loop = nullptr;
    napi_get_uv_event_loop(env, &loop);
    poll_ = new uv_poll_t;
    if (uv_poll_init(loop, poll_, fd_) != 0) {
      delete poll_;
      poll_ = nullptr;
      Napi::Error::New(env, "uv_poll_init failed").ThrowAsJavaScriptException();
      return;
    }
    poll_->data = this;
  }

  ~Queue() override { Shutdown(); }

 private:
  // The ring for writes, or uringErr_ saying why not (an errno; -1 not built).
  void InitRing() {
#ifdef KUBETUN_HAVE_LIBURING
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    // one thread submits, completions are reaped by that thread inside the same enter
    p.flags = IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN | IORING_SETUP_SINGLE_ISSUER;
    int rc = io_uring_queue_init_params(kRingEntries, &ring_, &p);
    if (rc == -EINVAL) {  // a kernel before 6.0 knows not all of those flags
      memset(&p, 0, sizeof p);
      rc = io_uring_queue_init_params(kRingEntries, &ring_, &p);
    }
    if (rc < 0) {
      uringErr_ = -rc;
      return;
    }
    // a registered fd spares the kernel an fd lookup per SQE; without it, the plain fd
    fixed_ = io_uring_register_files(&ring_, &fd_, 1) == 0;
    ring_ok_ = true;
    uringErr_ = 0;
#endif
  }

  void ExitRing() {
#ifdef KUBETUN_HAVE_LIBURING
    // The ring is torn down asynchronously (a kernel work item): unregistering the fd first
    // keeps close() what it was — the last fd of a non-persistent TUN deletes the device now.
    if (ring_ok_ && fixed_) io_uring_unregister_files(&ring_);
    if (ring_ok_) io_uring_queue_exit(&ring_);
    ring_ok_ = false;
#endif
  }

  Napi::Value TxUring(const Napi::CallbackInfo& info) {
    return Napi::Number::New(info.Env(), uringErr_);
  }

  Napi::Value Start(const Napi::CallbackInfo& info) {
    if (poll_ && !polling_) {
      uv_poll_start(poll_, UV_READABLE, OnReadable);
      polling_ = true;
      Ref();  // an active queue must not be collected while the fd is being watched
    }
    return info.Env().Undefined();
  }

  Napi::Value Stop(const Napi::CallbackInfo& info) {
    StopPolling();
    return info.Env().Undefined();
  }

  Napi::Value Close(const Napi::CallbackInfo& info) {
    Shutdown();
    return info.Env().Undefined();
  }

  void StopPolling() {
    if (poll_ && polling_) {
      uv_poll_stop(poll_);
      polling_ = false;
      Unref();
    }
  }

  void Shutdown() {
    if (closed_) return;
    StopPolling();
    closed_ = true;
    if (poll_) {
      uv_close(reinterpret_cast<uv_handle_t*>(poll_),
               [](uv_handle_t* h) { delete reinterpret_cast<uv_poll_t*>(h); });
      poll_ = nullptr;
    }
    ExitRing();  // the ring's registered file holds the device too
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  static void OnReadable(uv_poll_t* handle, int status, int events) {
    static_cast<Queue*>(handle->data)->Drain(status);
  }

  // Read until EAGAIN, the batch limit, or too little room for another packet; then one call.
  void Drain(int status) {
    uint32_t n = 0;
    int err = status < 0 ? -status : 0;
    size_t pos = 0;
    while (err == 0 && n < batchMax_ && rxCap_ - pos >= kReadRoom) {
      ssize_t r = ::read(fd_, rx_ + pos, rxCap_ - pos);
      if (r < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN) err = errno;
        break;
      }
      if (r == 0) break;
      offs_[n] = static_cast<uint32_t>(pos);
      lens_[n] = static_cast<uint32_t>(r);
      n++;
      stats_[RX_PACKETS] += 1;
      stats_[RX_BYTES] += static_cast<double>(r);
      pos = (pos + static_cast<size_t>(r) + kAlign - 1) & ~(kAlign - 1);
    }
    if (err != 0) {
      // A dead fd (device deleted underneath us) would make a level-triggered poll spin.
      stats_[RX_ERRORS] += 1;
      StopPolling();
    }
    if (n == 0 && err == 0) return;
    if (n > 0) stats_[RX_BATCHES] += 1;
    Call(n, err);
  }

  void Call(uint32_t n, int err) {
    Napi::Env env = Env();
    Napi::HandleScope scope(env);
    napi_value args[2] = {Napi::Number::New(env, n), Napi::Number::New(env, err)};
    cb_.MakeCallback(Value(), 2, args, *asyncCtx_);
    if (env.IsExceptionPending()) {
      // From a libuv callback nobody would see the exception: make it an uncaught one.
      napi_value e;
      napi_get_and_clear_last_exception(env, &e);
      napi_fatal_exception(env, e);
    }
  }

  // Writes one packet; returns 1 when the kernel took it, 0 when it refused it (counted).
  int WriteOne(const uint8_t* data, size_t len) {
    for (;;) {
      stats_[TX_SYSCALLS] += 1;
      ssize_t r = ::write(fd_, data, len);
      if (r >= 0) return Wrote(r);
      if (errno == EINTR) continue;
      return Refused(errno);
    }
  }

  int Wrote(ssize_t r) {
    stats_[TX_PACKETS] += 1;
    stats_[TX_BYTES] += static_cast<double>(r);
    return 1;
  }

  int Refused(int err) {
    stats_[TX_ERRORS] += 1;
    if (err == EINVAL) stats_[TX_EINVAL] += 1;
    if (err == EAGAIN) stats_[TX_EAGAIN] += 1;
    return 0;
  }

  static bool BadSlice(size_t cap, uint32_t off, uint32_t len) {
    return off > cap || len > cap - off || len == 0;
  }

#ifdef KUBETUN_HAVE_LIBURING
  // The batch as write SQEs, kRingEntries per io_uring_enter, each enter waiting for all of its
  // completions (they are posted during the submit: TUN writes do not block).
  uint32_t WriteRing(const uint8_t* data, size_t cap, const uint32_t* o, const uint32_t* l,
                     size_t n) {
    uint32_t written = 0;
    size_t i = 0;
    int giveUp = 0;  // an errno that says the ring cannot write to this TUN at all
    while (i < n) {
      unsigned queued = 0;
      for (; i < n && queued < kRingEntries; i++) {
        if (BadSlice(cap, o[i], l[i])) {
          stats_[TX_BAD_SLICE] += 1;
          continue;
        }
        struct io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) break;  // cannot happen: the ring is empty at each round's start
        // offset -1: the file's own position, as write() uses (a TUN ignores it)
        io_uring_prep_write(sqe, fixed_ ? 0 : fd_, data + o[i], l[i], static_cast<__u64>(-1));
        io_uring_sqe_set_data64(sqe, i);  // which packet, for a retry by write()
        // EAGAIN, as write() on the O_NONBLOCK fd: io_uring ignores O_NONBLOCK on a pollable
        // file and would wait for room instead (a read SQE waits for a packet the same way)
        sqe->rw_flags = RWF_NOWAIT;
        if (fixed_) sqe->flags |= IOSQE_FIXED_FILE;
        queued++;
      }
      if (queued == 0) break;  // only bad slices were left
      stats_[TX_SYSCALLS] += 1;
      int rc = io_uring_submit_and_wait(&ring_, queued);
      unsigned reaped = 0;
      while (reaped < queued) {
        if (rc < 0 && rc != -EINTR) {
          // Not expected with a ring this queue owns alone; the SQEs may still be in it, so the
          // ring is given up (its exit cancels them) and the rest goes by write().
          for (; reaped < queued; reaped++) Refused(-rc);
          ExitRing();
          uringErr_ = -rc;
          break;
        }
        struct io_uring_cqe* cqe;
        unsigned head;
        unsigned seen = 0;
        io_uring_for_each_cqe(&ring_, head, cqe) {
          int res = cqe->res;
          if (res >= 0) {
            written += Wrote(res);
          } else if (res == -EAGAIN || res == -EINVAL) {
            written += Refused(-res);  // a full TUN, a bad packet: what write() answers too
          } else {
            // The kernel refuses the ring's kind of write itself (a TUN without FMODE_NOWAIT
            // answers RWF_NOWAIT with EOPNOTSUPP; the VM lab's Debian 12 kernel forwarded
            // nothing through the ring): this packet goes by write(), and the ring is given
            // up after this round (giveUp).
            // A packet write() refuses as well leaves the ring in use.
            size_t k = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
            int ok = WriteOne(data + o[k], l[k]);
            written += ok;
            if (ok == 1) giveUp = -res;
          }
          seen++;
        }
        io_uring_cq_advance(&ring_, seen);
        reaped += seen;
        if (reaped < queued) {
          stats_[TX_SYSCALLS] += 1;
          rc = io_uring_submit_and_wait(&ring_, queued - reaped);
        }
      }
      if (giveUp != 0 && ring_ok_) {
        ExitRing();
        uringErr_ = giveUp;
      }
      if (!ring_ok_) {
        for (; i < n; i++) {
          if (BadSlice(cap, o[i], l[i])) {
            stats_[TX_BAD_SLICE] += 1;
          } else {
            written += WriteOne(data + o[i], l[i]);
          }
        }
      }
    }
    return written;
  }
#endif

  Napi::Value WriteBatch(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsTypedArray() || !info[1].IsTypedArray() || !info[2].IsTypedArray() ||
        !info[3].IsNumber()) {
      Napi::TypeError::New(env, "writeBatch(buf: Uint8Array, offs, lens: Uint32Array, n)")
          .ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Uint8Array buf = info[0].As<Napi::Uint8Array>();
    Napi::Uint32Array offs = info[1].As<Napi::Uint32Array>();
    Napi::Uint32Array lens = info[2].As<Napi::Uint32Array>();
    size_t n = info[3].As<Napi::Number>().Uint32Value();
    if (n > offs.ElementLength()) n = offs.ElementLength();
    if (n > lens.ElementLength()) n = lens.ElementLength();
    if (closed_) return Napi::Number::New(env, 0);
    const uint8_t* data = buf.Data();
    size_t cap = buf.ByteLength();
    const uint32_t* o = offs.Data();
    const uint32_t* l = lens.Data();
#ifdef KUBETUN_HAVE_LIBURING
    if (ring_ok_) return Napi::Number::New(env, WriteRing(data, cap, o, l, n));
#endif
    uint32_t written = 0;
    for (size_t i = 0; i < n; i++) {
      if (BadSlice(cap, o[i], l[i])) {
        stats_[TX_BAD_SLICE] += 1;
        continue;
      }
      written += WriteOne(data + o[i], l[i]);
    }
    return Napi::Number::New(env, written);
  }

  Napi::Value Write(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    if (!info[0].IsTypedArray() || !info[1].IsNumber() || !info[2].IsNumber()) {
      Napi::TypeError::New(env, "write(buf: Uint8Array, off, len)").ThrowAsJavaScriptException();
      return env.Undefined();
    }
    Napi::Uint8Array buf = info[0].As<Napi::Uint8Array>();
    size_t off = info[1].As<Napi::Number>().Uint32Value();
    size_t len = info[2].As<Napi::Number>().Uint32Value();
    if (closed_) return Napi::Boolean::New(env, false);
    if (BadSlice(buf.ByteLength(), off, len)) {
      stats_[TX_BAD_SLICE] += 1;
      return Napi::Boolean::New(env, false);
    }
    return Napi::Boolean::New(env, WriteOne(buf.Data() + off, len) == 1);
  }

  Napi::Reference<Napi::Uint8Array> rxRef_;
  Napi::Reference<Napi::Uint32Array> offsRef_;
  Napi::Reference<Napi::Uint32Array> lensRef_;
  Napi::Reference<Napi::Float64Array> statsRef_;
  Napi::FunctionReference cb_;
  std::unique_ptr<Napi::AsyncContext> asyncCtx_;
  uint8_t* rx_ = nullptr;
  size_t rxCap_ = 0;
  uint32_t* offs_ = nullptr;
  uint32_t* lens_ = nullptr;
  double* stats_ = nullptr;
  uint32_t batchMax_ = 0;
  int fd_ = -1;
  uv_poll_t* poll_ = nullptr;
  bool polling_ = false;
  bool closed_ = false;
  int uringErr_ = -1;
#ifdef KUBETUN_HAVE_LIBURING
  struct io_uring ring_;
  bool ring_ok_ = false;
  bool fixed_ = false;
#endif
};

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("open", Napi::Function::New(env, Open));
  exports.Set("setOffload", Napi::Function::New(env, SetOffload));
  exports.Set("setPersist", Napi::Function::New(env, SetPersist));
  exports.Set("setMtu", Napi::Function::New(env, SetMtu));
  exports.Set("setTxQueueLen", Napi::Function::New(env, SetTxQueueLen));
  exports.Set("setUp", Napi::Function::New(env, SetUp));
  exports.Set("Queue", Queue::Init(env));
  exports.Set("STAT_COUNT", Napi::Number::New(env, STAT_COUNT));
#ifdef KUBETUN_HAVE_LIBURING
  exports.Set("uringBuilt", Napi::Boolean::New(env, true));
#else
  exports.Set("uringBuilt", Napi::Boolean::New(env, false));
#endif
  kubetun_pin::Init(env, exports);
  return exports;
}

}  // namespace

NODE_API_MODULE(kubetun_tun, Init)
