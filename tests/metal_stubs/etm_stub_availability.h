// Stub of the SDK's availability macros (Availability.h, os/availability.h; named apart so
// that it never shadows the real header on a Mac), for the Linux type-check of native/device/metal/
// (tests/test_metal_syntax.py). Not Apple's header: just enough for the declarations in
// Foundation/Foundation.h and Metal/Metal.h here.
//
// ETM_STUB_SDK_VERSION picks the SDK being imitated, as __MAC_OS_X_VERSION_MAX_ALLOWED
// (docs: Availability.h, "SDK-conditional compilation"): 150000 (default) declares the
// macOS 15 API, 140000 leaves it out, like Xcode 15's SDK.
#pragma once

#ifndef ETM_STUB_SDK_VERSION
#define ETM_STUB_SDK_VERSION 150000
#endif
#define __MAC_OS_X_VERSION_MAX_ALLOWED ETM_STUB_SDK_VERSION

// API_AVAILABLE(macos(15.0), ios(18.0)) -> availability attribute for macOS; other
// platforms are ignored because the device is built for macOS only.
#define ETM_STUB_INTRODUCED_macos(version) __attribute__((availability(macos, introduced = version)))
#define ETM_STUB_INTRODUCED_ios(version)
#define ETM_STUB_INTRODUCED_macCatalyst(version)
#define ETM_STUB_INTRODUCED_1(a) ETM_STUB_INTRODUCED_##a
#define ETM_STUB_INTRODUCED_2(a, b) ETM_STUB_INTRODUCED_##a ETM_STUB_INTRODUCED_##b
#define ETM_STUB_INTRODUCED_3(a, b, c) \
  ETM_STUB_INTRODUCED_##a ETM_STUB_INTRODUCED_##b ETM_STUB_INTRODUCED_##c
#define ETM_STUB_PICK(_1, _2, _3, name, ...) name
#define API_AVAILABLE(...) \
  ETM_STUB_PICK(__VA_ARGS__, ETM_STUB_INTRODUCED_3, ETM_STUB_INTRODUCED_2, \
                ETM_STUB_INTRODUCED_1, unused)(__VA_ARGS__)

// API_DEPRECATED("message", macos(introduced, deprecated), ...)
#define ETM_STUB_DEPRECATED_macos(introduced_version, deprecated_version) \
  macos, introduced = introduced_version, deprecated = deprecated_version
#define API_DEPRECATED(text, platform, ...) \
  __attribute__((availability(ETM_STUB_DEPRECATED_##platform, message = text)))

#define API_UNAVAILABLE(...)
