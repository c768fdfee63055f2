#include "tokengate/store/state_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokengate/core/saturate.hpp"
#include "tokengate/core/sha256.hpp"

namespace tokengate::store {

namespace {

constexpr std::string_view k_magic = "TGSTATE\n";
constexpr std::uint32_t k_version = 2;

template <class T>
void put(std::string& out, T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));  // little-endian hosts only (x86-64, arm64), as the format says
    out.append(raw, sizeof(T));
}

class Reader {
public:
    explicit Reader(std::string_view bytes) : bytes_(bytes) {}
    template <class T>
    T get(const char* what) {
        T value;
        std::memcpy(&value, take(sizeof(T), what).data(), sizeof(T));
        return value;
    }
    std::string_view take(std::size_t n, const char* what) {
        if (bytes_.size() - at_ < n) throw StateFileError(std::string("truncated (in ") + what + ")");
        auto out = bytes_.substr(at_, n);
        at_ += n;
        return out;
    }
    std::size_t left() const { return bytes_.size() - at_; }

private:
    std::string_view bytes_;
    std::size_t at_ = 0;
};

bool in_range(const SavedQuota& q) {
    return std::isfinite(q.used) && q.used >= 0 && q.used <= core::k_max_counter && std::isfinite(q.added) &&
           q.added >= 0 && q.added <= core::k_max_counter && q.window.start < q.window.end;
}

void put_key(std::string& out, std::string_view key) {
    key = key.substr(0, 0xffff);
    put<std::uint16_t>(out, static_cast<std::uint16_t>(key.size()));
    out.append(key);
}

bool in_range(const SavedBucket& b) {
    // The config loader's own bounds for a limit (docs/hardening.md).
    return std::isfinite(b.capacity) && b.capacity > 0 && b.capacity <= 1e15 && std::isfinite(b.rate_per_s) &&
           b.rate_per_s >= 1e-9 && b.rate_per_s <= 1e12 && std::isfinite(b.tokens) &&
           b.tokens >= -core::k_max_counter && b.tokens <= b.capacity;
}

}  // namespace

std::string encode_state(const StateSnapshot& snapshot) {
    const auto& levels = snapshot.levels;
    std::string records;
    records.reserve(levels.buckets.size() * 64 + levels.quotas.size() * 72);
    for (const auto& b : levels.buckets) {
        put_key(records, b.key);
        put(records, b.capacity);
        put(records, b.rate_per_s);
        put(records, b.tokens);
    }
    for (const auto& q : levels.quotas) {
        put_key(records, q.key);
        put(records, q.used);
        put(records, q.added);
        put(records, q.window.start);
        put(records, q.window.end);
    }
    std::string out;
    out.reserve(8 + 4 + 8 + 16 + 32 + records.size());
    out.append(k_magic);
    put(out, k_version);
    put(out, snapshot.written_at_unix_ns);
    put<std::uint64_t>(out, levels.buckets.size());
    put<std::uint64_t>(out, levels.quotas.size());
    auto digest = core::sha256(records);
    out.append(reinterpret_cast<const char*>(digest.data()), digest.size());
    out.append(records);
    return out;
}

StateSnapshot decode_state(std::string_view bytes) {
    Reader in(bytes);
    if (in.take(k_magic.size(), "the header") != k_magic) throw StateFileError("not a tokengate state file");
    auto version = in.get<std::uint32_t>("the header");
    if (version != 1 && version != k_version)
        throw StateFileError("format version " + std::to_string(version) + "; this gateway reads versions 1 and " +
                             std::to_string(k_version));
    StateSnapshot s;
    s.written_at_unix_ns = in.get<std::int64_t>("the header");
    auto buckets = in.get<std::uint64_t>("the header");
    auto quotas = version >= 2 ? in.get<std::uint64_t>("the header") : 0;
    auto digest = in.take(32, "the header");
    auto records = bytes.substr(bytes.size() - in.left());
    auto actual = core::sha256(records);
    if (std::memcmp(actual.data(), digest.data(), 32) != 0)
        throw StateFileError("checksum mismatch: the file is corrupt");
    // A bucket is at least 26 bytes and a quota 34: counts the bytes cannot hold are refused
    // before anything is reserved.
    if (buckets > records.size() / 26 || quotas > records.size() / 34 || buckets * 26 + quotas * 34 > records.size())
        throw StateFileError("record counts " + std::to_string(buckets) + " and " + std::to_string(quotas) +
                             " are impossible");
    auto& levels = s.levels;
    levels.buckets.reserve(buckets);
    for (std::uint64_t i = 0; i < buckets; ++i) {
        SavedBucket b;
        auto key_size = in.get<std::uint16_t>("a record");
        b.key = std::string(in.take(key_size, "a record"));
        b.capacity = in.get<double>("a record");
        b.rate_per_s = in.get<double>("a record");
        b.tokens = in.get<double>("a record");
        if (!in_range(b)) throw StateFileError("record " + std::to_string(i) + " (" + b.key + ") is out of range");
        levels.buckets.push_back(std::move(b));
    }
    levels.quotas.reserve(quotas);
    for (std::uint64_t i = 0; i < quotas; ++i) {
        SavedQuota q;
        auto key_size = in.get<std::uint16_t>("a quota");
        q.key = std::string(in.take(key_size, "a quota"));
        q.used = in.get<double>("a quota");
        q.added = in.get<double>("a quota");
        q.window.start = in.get<std::int64_t>("a quota");
        q.window.end = in.get<std::int64_t>("a quota");
        if (!in_range(q)) throw StateFileError("quota " + std::to_string(i) + " (" + q.key + ") is out of range");
        levels.quotas.push_back(std::move(q));
    }
    if (in.left() != 0) throw StateFileError(std::to_string(in.left()) + " bytes after the last record");
    return s;
}

std::optional<std::string> read_state_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        if (errno == ENOENT) return std::nullopt;
        throw StateFileError(std::string("cannot read it: ") + std::strerror(errno));
    }
    std::ostringstream bytes;
    bytes << file.rdbuf();
    return std::move(bytes).str();
}

bool write_state_file(const std::string& path, std::string_view bytes, std::string& error) {
    auto temp = path + ".tmp";
    auto fail = [&](const std::string& step) {
        error = step + " " + temp + ": " + std::strerror(errno);
        return false;
    };
    // Created afresh, never through a planted link: a leftover from a crash is removed first.
    ::unlink(temp.c_str());
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return fail("cannot create");
    for (std::size_t written = 0; written < bytes.size();) {
        auto n = ::write(fd, bytes.data() + written, bytes.size() - written);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int saved = errno ? errno : ENOSPC;
            ::close(fd);
            ::unlink(temp.c_str());
            errno = saved;
            return fail("cannot write");
        }
        written += static_cast<std::size_t>(n);
    }
    if (::fsync(fd) != 0) {
        int saved = errno;
        ::close(fd);
        ::unlink(temp.c_str());
        errno = saved;
        return fail("cannot fsync");
    }
    ::close(fd);
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        int saved = errno;
        ::unlink(temp.c_str());
        errno = saved;
        return fail("cannot rename");
    }
    // The rename itself must reach the disk, or a crash could bring the old name back.
    auto dir = std::filesystem::path(path).parent_path().string();
    if (dir.empty()) dir = ".";
    if (int d = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
        ::fsync(d);
        ::close(d);
    }
    return true;
}

}  // namespace tokengate::store
