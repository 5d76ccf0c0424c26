//! Image type sniffing by magic bytes, with pi 1.6.0's rules (`utils/mime.js`):
//! JPEG (not JPEG-LS), PNG (not animated), GIF, WebP and BMP.

/// Bytes pi reads from the start of a file to decide.
pub const SNIFF_BYTES: usize = 4100;

const PNG_SIGNATURE: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a];

/// The MIME type of a supported image, from the first `SNIFF_BYTES` of a file.
///
/// ```
/// use pi_native_ops_core::image::detect_image_mime;
///
/// assert_eq!(detect_image_mime(b"GIF89a\x01\x00\x01\x00"), Some("image/gif"));
/// // JPEG-LS starts like a JPEG; pi does not send it as an image.
/// assert_eq!(detect_image_mime(&[0xff, 0xd8, 0xff, 0xf7]), None);
/// assert_eq!(detect_image_mime(b"plain text"), None);
/// ```
pub fn detect_image_mime(head: &[u8]) -> Option<&'static str> {
    if head.starts_with(&[0xff, 0xd8, 0xff]) {
        return (head.get(3) != Some(&0xf7)).then_some("image/jpeg");
    }
    if head.starts_with(PNG_SIGNATURE) {
        return (is_png(head) && !is_animated_png(head)).then_some("image/png");
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return Some("image/gif");
    }
    if head.starts_with(b"RIFF") && head.get(8..12) == Some(b"WEBP") {
        return Some("image/webp");
    }
    if head.starts_with(b"BM") && is_bmp(head) {
        return Some("image/bmp");
    }
    None
}

/// Reads like pi's helpers: bytes past the end count as zero.
fn byte(b: &[u8], i: usize) -> u32 {
    b.get(i).copied().unwrap_or(0) as u32
}

fn u16_le(b: &[u8], i: usize) -> u32 {
    byte(b, i) | byte(b, i + 1) << 8
}

fn u32_le(b: &[u8], i: usize) -> u64 {
    (u16_le(b, i) as u64) | (u16_le(b, i + 2) as u64) << 16
}

fn u32_be(b: &[u8], i: usize) -> u64 {
    ((byte(b, i) as u64) << 24)
        | ((byte(b, i + 1) as u64) << 16)
        | ((byte(b, i + 2) as u64) << 8)
        | byte(b, i + 3) as u64
}

fn is_png(b: &[u8]) -> bool {
    b.len() >= 16 && u32_be(b, 8) == 13 && &b[12..16] == b"IHDR"
}

fn is_animated_png(b: &[u8]) -> bool {
    let mut offset = PNG_SIGNATURE.len();
    while offset + 8 <= b.len() {
        match &b[offset + 4..offset + 8] {
            b"acTL" => return true,
            b"IDAT" => return false,
            _ => {}
        }
        let next = offset as u64 + 8 + u32_be(b, offset) + 4;
        if next > b.len() as u64 {
            return false;
        }
        offset = next as usize;
    }
    false
}

fn is_bmp(b: &[u8]) -> bool {
    if b.len() < 26 {
        return false;
    }
    let (declared, pixels, dib) = (u32_le(b, 2), u32_le(b, 10), u32_le(b, 14));
    if (declared != 0 && declared < 26)
        || pixels < 14 + dib
        || (declared != 0 && pixels >= declared)
    {
        return false;
    }
    let (planes, bits) = match dib {
        12 => (u16_le(b, 22), u16_le(b, 24)),
        40..=124 if b.len() >= 30 => (u16_le(b, 26), u16_le(b, 28)),
        _ => return false,
    };
    planes == 1 && [1, 4, 8, 16, 24, 32].contains(&bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(chunk: &[u8; 4]) -> Vec<u8> {
        let mut v = PNG_SIGNATURE.to_vec();
        v.extend_from_slice(&[0, 0, 0, 13]);
        v.extend_from_slice(b"IHDR");
        v.extend_from_slice(&[0; 13 + 4]);
        v.extend_from_slice(&[0, 0, 0, 0]);
        v.extend_from_slice(chunk);
        v
    }

    #[test]
    fn detects_supported_images() {
        assert_eq!(
            detect_image_mime(&[0xff, 0xd8, 0xff, 0xe0]),
            Some("image/jpeg")
        );
        assert_eq!(detect_image_mime(&[0xff, 0xd8, 0xff, 0xf7]), None);
        assert_eq!(detect_image_mime(&png(b"IDAT")), Some("image/png"));
        assert_eq!(detect_image_mime(&png(b"acTL")), None);
        assert_eq!(detect_image_mime(b"GIF89a...."), Some("image/gif"));
        assert_eq!(
            detect_image_mime(b"RIFF\0\0\0\0WEBPVP8 "),
            Some("image/webp")
        );
        let mut bmp = vec![0u8; 54];
        bmp[..2].copy_from_slice(b"BM");
        bmp[10] = 54;
        bmp[14] = 40;
        bmp[26] = 1;
        bmp[28] = 24;
        assert_eq!(detect_image_mime(&bmp), Some("image/bmp"));
        assert_eq!(detect_image_mime(b"plain text"), None);
        assert_eq!(detect_image_mime(b""), None);
    }
}
