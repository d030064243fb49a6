// SPDX-License-Identifier: MIT
// The translation unit that builds kvscope's precompiled libtorch header (see core/CMakeLists.txt).
