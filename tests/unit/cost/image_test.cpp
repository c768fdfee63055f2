// Image sizes from the first bytes of a data URL, and SPEC §11's tokens per image.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokengate/cost/cost.hpp"
#include "tokengate/cost/image.hpp"

namespace tokengate::cost {
namespace {

std::string base64(const std::vector<std::uint8_t>& bytes) {
    static constexpr char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        std::uint32_t n =
            bytes[i] << 16 | (i + 1 < bytes.size() ? bytes[i + 1] << 8 : 0) | (i + 2 < bytes.size() ? bytes[i + 2] : 0);
        out += k_alphabet[n >> 18 & 63];
        out += k_alphabet[n >> 12 & 63];
        out += i + 1 < bytes.size() ? k_alphabet[n >> 6 & 63] : '=';
        out += i + 2 < bytes.size() ? k_alphabet[n & 63] : '=';
    }
    return out;
}

void put_be(std::vector<std::uint8_t>& b, std::uint32_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_le(std::vector<std::uint8_t>& b, std::uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put(std::vector<std::uint8_t>& b, std::string_view s) { b.insert(b.end(), s.begin(), s.end()); }

/// A PNG's signature and IHDR chunk, then `padding` bytes of pixel data.
std::vector<std::uint8_t> png(std::uint32_t w, std::uint32_t h, std::size_t padding = 64) {
    std::vector<std::uint8_t> b;
    put(b, "\x89PNG\r\n\x1a\n");
    put_be(b, 13, 4);
    put(b, "IHDR");
    put_be(b, w, 4);
    put_be(b, h, 4);
    put(b, std::string_view("\x08\x06\x00\x00\x00", 5));
    put_be(b, 0, 4);  // CRC (not checked)
    b.resize(b.size() + padding, 0x5a);
    return b;
}

/// SOI, a JFIF APP0, an `app1`-byte APP1 (EXIF), then SOF0 with the size.
std::vector<std::uint8_t> jpeg(std::uint32_t w, std::uint32_t h, std::size_t app1 = 30000) {
    std::vector<std::uint8_t> b = {0xFF, 0xD8, 0xFF, 0xE0};
    put_be(b, 16, 2);
    put(b, std::string_view("JFIF\0\x01\x01\0\0\x01\0\x01\0\0", 14));
    b.push_back(0xFF);
    b.push_back(0xE1);
    put_be(b, static_cast<std::uint32_t>(app1 + 2), 2);
    b.resize(b.size() + app1, 0x11);
    b.push_back(0xFF);
    b.push_back(0xC0);
    put_be(b, 17, 2);
    b.push_back(8);
    put_be(b, h, 2);
    put_be(b, w, 2);
    b.resize(b.size() + 40, 0);
    return b;
}

std::vector<std::uint8_t> gif(std::uint32_t w, std::uint32_t h) {
    std::vector<std::uint8_t> b;
    put(b, "GIF89a");
    put_le(b, w, 2);
    put_le(b, h, 2);
    b.resize(b.size() + 16, 0);
    return b;
}

std::vector<std::uint8_t> webp(std::string_view kind, std::uint32_t w, std::uint32_t h) {
    std::vector<std::uint8_t> b;
    put(b, "RIFF");
    put_le(b, 100, 4);
    put(b, "WEBP");
    put(b, kind);
    put_le(b, 50, 4);
    if (kind == "VP8 ") {
        put(b, std::string_view("\x00\x00\x00\x9d\x01\x2a", 6));
        put_le(b, w, 2);
        put_le(b, h, 2);
    } else if (kind == "VP8L") {
        b.push_back(0x2F);
        put_le(b, (w - 1) | (h - 1) << 14, 4);
    } else {
        put_le(b, 0, 4);
        put_le(b, w - 1, 3);
        put_le(b, h - 1, 3);
    }
    b.resize(b.size() + 32, 0);
    return b;
}

std::string url(const std::vector<std::uint8_t>& bytes, std::string_view type = "image/png") {
    return "data:" + std::string(type) + ";base64," + base64(bytes);
}

ImageSize size_of(const std::string& u) {
    auto p = probe_data_url(u);
    EXPECT_EQ(p.result, ImageProbe::Result::size) << p.why;
    return p.size;
}

TEST(ImageProbe, ReadsEachFormatsHeader) {
    auto s = size_of(url(png(640, 480)));
    EXPECT_EQ(s.width, 640u);
    EXPECT_EQ(s.height, 480u);
    s = size_of(url(jpeg(1920, 1080), "image/jpeg"));
    EXPECT_EQ(s.width, 1920u) << "past a 30 KB EXIF segment";
    EXPECT_EQ(s.height, 1080u);
    s = size_of(url(gif(320, 200), "image/gif"));
    EXPECT_EQ(s.width, 320u);
    EXPECT_EQ(s.height, 200u);
    for (std::string_view kind : {"VP8 ", "VP8L", "VP8X"}) {
        s = size_of(url(webp(kind, 800, 600), "image/webp"));
        EXPECT_EQ(s.width, 800u) << kind;
        EXPECT_EQ(s.height, 600u) << kind;
    }
}

TEST(ImageProbe, BadDataUrlsAreMalformedAndOtherFormatsUnreadable) {
    using R = ImageProbe::Result;
    EXPECT_EQ(probe_data_url("https://example.com/cat.png").result, R::malformed);
    EXPECT_EQ(probe_data_url("data:image/png,rawbytes").result, R::malformed) << "not base64";
    EXPECT_EQ(probe_data_url("data:image/png;base64").result, R::malformed) << "no data";
    EXPECT_EQ(probe_data_url("data:image/png;base64,!!!!$$$$****").result, R::malformed) << "bad base64";
    auto cut = png(640, 480);
    cut.resize(12);
    EXPECT_EQ(probe_data_url(url(cut)).result, R::malformed) << "a PNG cut inside its header";
    auto jpeg_cut = jpeg(10, 10);
    jpeg_cut.resize(2000);  // the EXIF segment claims 30 KB
    EXPECT_EQ(probe_data_url(url(jpeg_cut, "image/jpeg")).result, R::malformed);
    EXPECT_EQ(probe_data_url(url(png(0, 480))).result, R::malformed) << "zero width";
    EXPECT_EQ(probe_data_url("data:image/bmp;base64," + base64({'B', 'M', 1, 2, 3, 4, 5, 6})).result, R::unreadable);
}

TEST(ImageTokens, OpenAisHighDetailRule) {
    config::ImageScheme tiles;
    EXPECT_EQ(image_tokens({1024, 1024}, tiles, false), 765u) << "OpenAI's worked example";
    EXPECT_EQ(image_tokens({2048, 4096}, tiles, false), 1105u) << "OpenAI's worked example";
    EXPECT_EQ(image_tokens({4096, 8192}, tiles, true), 85u) << "low detail: the base";
    EXPECT_EQ(image_tokens({640, 480}, tiles, false), 85u + 2 * 170u);
    EXPECT_EQ(image_tokens({65535, 65535}, tiles, false), 765u) << "capped by the scheme, not overflowed";
    EXPECT_EQ(image_tokens({65535, 1}, tiles, false), 85u + 4 * 170u);
}

TEST(ImageTokens, QwenPatches) {
    config::ImageScheme patches;
    patches.kind = config::ImageScheme::Kind::patches;
    EXPECT_EQ(image_tokens({1000, 1000}, patches, false), 36u * 36u);
    EXPECT_EQ(image_tokens({28, 28}, patches, false), 1u);
    auto huge = image_tokens({65535, 65535}, patches, false);
    EXPECT_LE(huge, 1003520u / (28 * 28) + 2 * 37) << "scaled down to max_pixels";
    EXPECT_GT(huge, 1000u);
    // Fuzz regression: a thin side rounded up to one pixel carried the other past max_pixels.
    EXPECT_LE(image_tokens({13, 1229472850}, patches, false), 1003520u / 28 + 1);
}

std::string chat_with(const std::string& part) {
    return R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},)" + part +
           "]}]}";
}

TEST(ImagePricing, Base64IsNeverCountedAsText) {
    auto big = png(640, 480, 300 * 1024);  // a 300 KB image
    auto body = chat_with(R"({"type":"image_url","image_url":{"url":")" + url(big) + R"("}})");
    auto p = parse_request_body(body, {}, nullptr, "/v1/chat/completions");
    ASSERT_EQ(p.error, BodyError::none) << p.message;
    EXPECT_EQ(p.summary.images, 1u);
    EXPECT_LT(p.summary.input_tokens, 500u) << "was 140,690 text tokens";
    EXPECT_GE(p.summary.input_tokens, 425u) << "85 + 2 tiles × 170";
}

TEST(ImagePricing, DetailUrlsMediaAndTheModelsScheme) {
    auto tokens = [](const std::string& part, const std::vector<config::ModelCost>* models = nullptr) {
        auto p = parse_request_body(chat_with(part), {}, nullptr, "/v1/chat/completions", models);
        EXPECT_EQ(p.error, BodyError::none) << p.message;
        return p.summary.input_tokens;
    };
    auto text_only =
        parse_request_body(
            R"({"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"}]}]})", {},
            nullptr, "/v1/chat/completions")
            .summary.input_tokens;
    auto image = R"({"type":"image_url","image_url":{"url":")" + url(png(1024, 1024)) + R"(","detail":"low"}})";
    EXPECT_EQ(tokens(image) - text_only, 85u);
    EXPECT_EQ(tokens(R"({"type":"image_url","image_url":{"url":"https://x/cat.png"}})") - text_only, 1000u);
    EXPECT_EQ(tokens(R"({"type":"input_audio","input_audio":{"data":")" + std::string(100000, 'A') +
                     R"(","format":"wav"}})") -
                  text_only,
              1000u);
    std::vector<config::ModelCost> models(1);
    models[0].pattern = "m";
    models[0].image_tokens.kind = config::ImageScheme::Kind::patches;
    models[0].image_default_tokens = 640;
    auto hd = R"({"type":"image_url","image_url":{"url":")" + url(png(1000, 1000)) + R"("}})";
    EXPECT_EQ(tokens(hd, &models) - text_only, 1296u) << "Qwen-VL patches for this model";
    EXPECT_EQ(tokens(R"({"type":"image_url","image_url":{"url":"https://x/cat.png"}})", &models) - text_only, 640u);
}

TEST(ImagePricing, ResponsesInputImages) {
    auto body = R"({"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"hi"},)"
                R"({"type":"input_image","image_url":")" +
                url(png(2048, 4096)) + R"("}]}]})";
    auto p = parse_request_body(body, {}, nullptr, "/v1/responses");
    ASSERT_EQ(p.error, BodyError::none) << p.message;
    EXPECT_EQ(p.summary.images, 1u);
    EXPECT_GE(p.summary.input_tokens, 1105u);
    EXPECT_LT(p.summary.input_tokens, 1130u);
}

TEST(ImagePricing, AMalformedImageIsA400) {
    auto cut = png(10, 10);
    cut.resize(10);
    for (const auto& part :
         {R"({"type":"image_url","image_url":{"url":")" + url(cut) + R"("}})",
          std::string(R"({"type":"image_url","image_url":{"url":"data:image/png;base64,%%%%%%%%%%%%"}})"),
          std::string(R"({"type":"image_url","image_url":{"detail":"low"}})"),
          std::string(R"({"type":"image_url","image_url":5})")}) {
        auto p = parse_request_body(chat_with(part), {}, nullptr, "/v1/chat/completions");
        EXPECT_EQ(p.error, BodyError::invalid_body) << part;
    }
}

}  // namespace
}  // namespace tokengate::cost
