// SPDX-License-Identifier: MIT
#include "core/util/fault_injection.h"

#ifdef KVSCOPE_FAULT_INJECTION

#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unistd.h>

namespace kvscope::fault {
namespace {

struct Settings {
    long long killAt = 0;              // 0: never
    const char* countFile = nullptr;   // null: do not report
};

const Settings& settings() {
    static const Settings s = [] {
        Settings made;
        if (const char* at = std::getenv("KVSCOPE_FAULT_AT")) made.killAt = std::atoll(at);
        made.countFile = std::getenv("KVSCOPE_FAULT_COUNT");
        return made;
    }();
    return s;
}

bool armed() { return settings().killAt > 0 || settings().countFile != nullptr; }

std::atomic<long long> passed{0};

void reportCount() {
    if (std::FILE* f = std::fopen(settings().countFile, "w")) {
        std::fprintf(f, "%lld\n", passed.load());
        std::fclose(f);
    }
}

// ---- SQLite: a VFS that forwards everything to the default one, counting file changes ----------
// Each open file is our header followed by the real VFS's file object.
struct HookedFile {
    sqlite3_file base;   // must be first: SQLite sees this
    sqlite3_file* real;  // points just past this struct
};

sqlite3_vfs* realVfs = nullptr;
sqlite3_vfs hookedVfs;
// Indexed by the real file's method version (1-3): SQLite only calls the WAL (2) and mmap (3)
// methods a file's version offers, so the hooked file offers exactly what the real one does.
sqlite3_io_methods hookedMethods[4];

sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<HookedFile*>(f)->real; }

int hookedClose(sqlite3_file* f) { return real(f)->pMethods->xClose(real(f)); }
int hookedRead(sqlite3_file* f, void* buffer, int amount, sqlite3_int64 offset) {
    return real(f)->pMethods->xRead(real(f), buffer, amount, offset);
}
int hookedWrite(sqlite3_file* f, const void* buffer, int amount, sqlite3_int64 offset) {
    point("sqlite write");
    return real(f)->pMethods->xWrite(real(f), buffer, amount, offset);
}
int hookedTruncate(sqlite3_file* f, sqlite3_int64 size) {
    point("sqlite truncate");
    return real(f)->pMethods->xTruncate(real(f), size);
}
int hookedSync(sqlite3_file* f, int flags) {
    point("sqlite sync");
    return real(f)->pMethods->xSync(real(f), flags);
}
int hookedFileSize(sqlite3_file* f, sqlite3_int64* size) { return real(f)->pMethods->xFileSize(real(f), size); }
int hookedLock(sqlite3_file* f, int level) { return real(f)->pMethods->xLock(real(f), level); }
int hookedUnlock(sqlite3_file* f, int level) { return real(f)->pMethods->xUnlock(real(f), level); }
int hookedCheckReservedLock(sqlite3_file* f, int* out) { return real(f)->pMethods->xCheckReservedLock(real(f), out); }
int hookedFileControl(sqlite3_file* f, int op, void* arg) { return real(f)->pMethods->xFileControl(real(f), op, arg); }
int hookedSectorSize(sqlite3_file* f) { return real(f)->pMethods->xSectorSize(real(f)); }
int hookedDeviceCharacteristics(sqlite3_file* f) { return real(f)->pMethods->xDeviceCharacteristics(real(f)); }
int hookedShmMap(sqlite3_file* f, int page, int size, int extend, void volatile** out) {
    return real(f)->pMethods->xShmMap(real(f), page, size, extend, out);
}
int hookedShmLock(sqlite3_file* f, int offset, int n, int flags) {
    return real(f)->pMethods->xShmLock(real(f), offset, n, flags);
}
void hookedShmBarrier(sqlite3_file* f) { real(f)->pMethods->xShmBarrier(real(f)); }
int hookedShmUnmap(sqlite3_file* f, int deleteFlag) { return real(f)->pMethods->xShmUnmap(real(f), deleteFlag); }
int hookedFetch(sqlite3_file* f, sqlite3_int64 offset, int amount, void** out) {
    return real(f)->pMethods->xFetch(real(f), offset, amount, out);
}
int hookedUnfetch(sqlite3_file* f, sqlite3_int64 offset, void* page) {
    return real(f)->pMethods->xUnfetch(real(f), offset, page);
}

int hookedOpen(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* outFlags) {
    auto* hooked = reinterpret_cast<HookedFile*>(f);
    hooked->real = reinterpret_cast<sqlite3_file*>(hooked + 1);
    const int rc = realVfs->xOpen(realVfs, name, hooked->real, flags, outFlags);
    // SQLite calls xClose only when xOpen set pMethods; mirror the real file's answer.
    const sqlite3_io_methods* methods = hooked->real->pMethods;
    hooked->base.pMethods = methods ? &hookedMethods[std::clamp(methods->iVersion, 1, 3)] : nullptr;
    return rc;
}
int hookedDelete(sqlite3_vfs*, const char* name, int syncDir) {
    point("sqlite delete");
    return realVfs->xDelete(realVfs, name, syncDir);
}

void installHookedVfs() {
    realVfs = sqlite3_vfs_find(nullptr);
    hookedVfs = *realVfs;  // access, full pathname, randomness, sleep, time... unchanged
    hookedVfs.zName = "kvscope-fault-injection";
    hookedVfs.szOsFile = static_cast<int>(sizeof(HookedFile)) + realVfs->szOsFile;
    hookedVfs.xOpen = hookedOpen;
    hookedVfs.xDelete = hookedDelete;
    for (int version = 1; version <= 3; ++version)
        hookedMethods[version] = sqlite3_io_methods{version,
                                                    hookedClose,
                                                    hookedRead,
                                                    hookedWrite,
                                                    hookedTruncate,
                                                    hookedSync,
                                                    hookedFileSize,
                                                    hookedLock,
                                                    hookedUnlock,
                                                    hookedCheckReservedLock,
                                                    hookedFileControl,
                                                    hookedSectorSize,
                                                    hookedDeviceCharacteristics,
                                                    hookedShmMap,
                                                    hookedShmLock,
                                                    hookedShmBarrier,
                                                    hookedShmUnmap,
                                                    hookedFetch,
                                                    hookedUnfetch};
    sqlite3_vfs_register(&hookedVfs, /*makeDefault=*/1);
}

}  // namespace

void point(const char* operation) {
    if (!armed()) return;
    static std::once_flag reporting;
    if (settings().countFile) std::call_once(reporting, [] { std::atexit(reportCount); });
    const long long n = ++passed;
    if (n == settings().killAt) {
        char line[160];
        const int length = std::snprintf(line, sizeof line,
                                         "kvscope: fault injection: killed at fault point %lld (%s)\n", n, operation);
        [[maybe_unused]] const ssize_t ignored = ::write(STDERR_FILENO, line, static_cast<std::size_t>(length));
        std::raise(SIGKILL);
    }
}

void installSqliteHook() {
    static std::once_flag installed;
    if (armed()) std::call_once(installed, installHookedVfs);
}

}  // namespace kvscope::fault

#else

namespace kvscope::fault {
void point(const char*) {}
void installSqliteHook() {}
}  // namespace kvscope::fault

#endif
