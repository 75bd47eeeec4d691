#include "objstore/s3_xml.h"

#include <cstdint>
#include <cstdlib>

#include "base/strings.h"

namespace stint {
namespace internal {
namespace {

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xC0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xE0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    *out += static_cast<char>(0xF0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    *out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// "&#65;" / "&#x41;" without the '&' and ';'. False for anything else.
bool NumericReference(std::string_view ref, uint32_t* cp) {
  if (ref.size() < 2 || ref[0] != '#') return false;
  const bool hex = ref[1] == 'x' || ref[1] == 'X';
  const std::string digits(ref.substr(hex ? 2 : 1));
  if (digits.empty() || digits.size() > 8) return false;
  char* end = nullptr;
  const unsigned long v = std::strtoul(digits.c_str(), &end, hex ? 16 : 10);
  if (*end != '\0' || v == 0 || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
  *cp = static_cast<uint32_t>(v);
  return true;
}

bool ParseBool(const std::optional<std::string>& v) { return v && Trim(*v) == "true"; }

std::string Field(std::string_view xml, std::string_view tag) {
  return XmlFirst(xml, tag).value_or("");
}

}  // namespace

std::string XmlUnescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '&') {
      out += s[i];
      continue;
    }
    const size_t semi = s.find(';', i);
    if (semi == std::string_view::npos || semi - i > 12) {
      out += '&';
      continue;
    }
    const std::string_view ref = s.substr(i + 1, semi - i - 1);
    uint32_t cp = 0;
    if (ref == "amp") {
      out += '&';
    } else if (ref == "lt") {
      out += '<';
    } else if (ref == "gt") {
      out += '>';
    } else if (ref == "quot") {
      out += '"';
    } else if (ref == "apos") {
      out += '\'';
    } else if (NumericReference(ref, &cp)) {
      AppendUtf8(cp, &out);
    } else {
      out += '&';
      continue;
    }
    i = semi;
  }
  return out;
}

std::string XmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<std::string_view> XmlElements(std::string_view xml, std::string_view tag) {
  std::vector<std::string_view> out;
  const std::string open = "<" + std::string(tag);
  const std::string close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    const size_t after = pos + open.size();
    if (after >= xml.size()) break;
    const char next = xml[after];
    if (next != '>' && next != '/' && next != ' ' && next != '\t' && next != '\r' && next != '\n') {
      pos = after;  // a longer name (<KeyMarker> for "Key")
      continue;
    }
    const size_t gt = xml.find('>', after);
    if (gt == std::string_view::npos) break;
    if (xml[gt - 1] == '/') {  // <tag/>
      out.emplace_back();
      pos = gt + 1;
      continue;
    }
    const size_t end = xml.find(close, gt + 1);
    if (end == std::string_view::npos) break;
    out.push_back(xml.substr(gt + 1, end - gt - 1));
    pos = end + close.size();
  }
  return out;
}

std::optional<std::string> XmlFirst(std::string_view xml, std::string_view tag) {
  const std::vector<std::string_view> all = XmlElements(xml, tag);
  if (all.empty()) return std::nullopt;
  return XmlUnescape(all.front());
}

S3ErrorBody ParseS3Error(std::string_view xml) {
  S3ErrorBody out;
  const std::vector<std::string_view> error = XmlElements(xml, "Error");
  if (error.empty()) return out;
  out.code = Trim(Field(error.front(), "Code"));
  out.message = Trim(Field(error.front(), "Message"));
  return out;
}

Result<S3ListPage> ParseListObjectsV2(std::string_view xml) {
  const std::vector<std::string_view> root = XmlElements(xml, "ListBucketResult");
  if (root.empty()) return Status::Internal("ListObjectsV2 answer is not a <ListBucketResult>");
  S3ListPage page;
  for (std::string_view entry : XmlElements(root.front(), "Contents")) {
    S3ObjectInfo info;
    const std::optional<std::string> key = XmlFirst(entry, "Key");
    if (!key || key->empty()) return Status::Internal("ListObjectsV2: a <Contents> without <Key>");
    info.key = *key;
    const std::string size = Trim(Field(entry, "Size"));
    if (!ParseDecimalU64(size, &info.size)) {
      return Status::Internal("ListObjectsV2: key '" + info.key + "' has <Size> '" + size +
                              "', not a number");
    }
    info.etag = Field(entry, "ETag");
    page.objects.push_back(std::move(info));
  }
  page.truncated = ParseBool(XmlFirst(root.front(), "IsTruncated"));
  page.next_continuation_token = Field(root.front(), "NextContinuationToken");
  if (page.truncated && page.next_continuation_token.empty()) {
    return Status::Internal("ListObjectsV2: a truncated page without <NextContinuationToken>");
  }
  return page;
}

Result<std::string> ParseInitiateMultipartUpload(std::string_view xml) {
  const std::string id = Trim(Field(xml, "UploadId"));
  if (id.empty()) return Status::Internal("CreateMultipartUpload answer has no <UploadId>");
  return id;
}

Result<S3UploadsPage> ParseListMultipartUploads(std::string_view xml) {
  const std::vector<std::string_view> root = XmlElements(xml, "ListMultipartUploadsResult");
  if (root.empty()) {
    return Status::Internal("ListMultipartUploads answer is not a <ListMultipartUploadsResult>");
  }
  S3UploadsPage page;
  for (std::string_view entry : XmlElements(root.front(), "Upload")) {
    S3MultipartUpload upload;
    upload.key = Field(entry, "Key");
    upload.upload_id = Trim(Field(entry, "UploadId"));
    upload.initiated = Trim(Field(entry, "Initiated"));
    if (upload.key.empty() || upload.upload_id.empty()) {
      return Status::Internal("ListMultipartUploads: an <Upload> without <Key> or <UploadId>");
    }
    page.uploads.push_back(std::move(upload));
  }
  page.truncated = ParseBool(XmlFirst(root.front(), "IsTruncated"));
  page.next_key_marker = Field(root.front(), "NextKeyMarker");
  page.next_upload_id_marker = Field(root.front(), "NextUploadIdMarker");
  if (page.truncated && page.next_key_marker.empty()) {
    return Status::Internal("ListMultipartUploads: a truncated page without <NextKeyMarker>");
  }
  return page;
}

Result<S3PartsPage> ParseListParts(std::string_view xml) {
  const std::vector<std::string_view> root = XmlElements(xml, "ListPartsResult");
  if (root.empty()) return Status::Internal("ListParts answer is not a <ListPartsResult>");
  S3PartsPage page;
  for (std::string_view entry : XmlElements(root.front(), "Part")) {
    S3Part part;
    uint64_t number = 0;
    const std::string number_text = Trim(Field(entry, "PartNumber"));
    const std::string size_text = Trim(Field(entry, "Size"));
    if (!ParseDecimalU64(number_text, &number) || number < 1 || number > 10000 ||
        !ParseDecimalU64(size_text, &part.size)) {
      return Status::Internal("ListParts: a <Part> with <PartNumber> '" + number_text +
                              "' and <Size> '" + size_text + "'");
    }
    part.part_number = static_cast<int>(number);
    part.etag = Field(entry, "ETag");
    page.parts.push_back(std::move(part));
  }
  page.truncated = ParseBool(XmlFirst(root.front(), "IsTruncated"));
  page.next_part_number_marker = Trim(Field(root.front(), "NextPartNumberMarker"));
  if (page.truncated && page.next_part_number_marker.empty()) {
    return Status::Internal("ListParts: a truncated page without <NextPartNumberMarker>");
  }
  return page;
}

std::vector<std::string> ParseDeleteErrors(std::string_view xml) {
  std::vector<std::string> out;
  for (std::string_view root : XmlElements(xml, "DeleteResult")) {
    for (std::string_view e : XmlElements(root, "Error")) {
      out.push_back(Field(e, "Key") + ": " + Field(e, "Code") + ": " + Field(e, "Message"));
    }
  }
  return out;
}

}  // namespace internal
}  // namespace stint
