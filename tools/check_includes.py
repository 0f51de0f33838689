#!/usr/bin/env python3
"""Include what you use, for the standard library: every file under cpp/ that names a std
facility includes its header itself, so no file compiles only because another header
happened to pull it in (GCC 13's libstdc++ and libc++ include less transitively than GCC 12).

A compiler cannot catch all of these: a header may legitimately include another (libc++'s
<deque> includes <stdexcept>), and then a file using std::logic_error with only <deque>
compiles everywhere we look. So this checks names against the table below.

Allowed without a direct include: what a .cpp/.mm gets from its own header (foo.cpp from
foo.h); what a Metal .mm gets from backends/metal/metal_internal.h (the backend's private
umbrella header); size_t. std::get is taken to mean <variant> (the attribute values).

    python3 tools/check_includes.py [paths...]      # default: cpp
    python3 tools/check_includes.py --fix cpp       # add the missing includes

Also refused: the iostream headers (<iostream>, <istream>, <ostream>, <sstream>, <fstream>,
<iomanip>). In builds on the GPU machines (GCC 13) formatted stream I/O crashed inside
libstdc++'s locale code: `ifstream >> long` reading sysfs in the CPU convolution planner, and
earlier an ostringstream making an NVRTC cache key. The core uses stdio and std::to_string.

Exit status 1 when a file lacks an include or includes an iostream header. Names not in the
table are ignored: extend the table when you use a new std facility.
"""
import pathlib
import re
import sys

HEADERS = {
    "algorithm": "sort stable_sort min max minmax clamp find find_if find_if_not count count_if reverse fill fill_n "
                 "copy copy_n transform all_of any_of none_of max_element min_element minmax_element unique "
                 "lower_bound upper_bound equal remove remove_if partial_sort nth_element binary_search rotate "
                 "mismatch for_each is_sorted partition stable_partition replace search adjacent_find "
                 "lexicographical_compare is_permutation make_heap push_heap pop_heap sort_heap generate shuffle",
    "any": "any any_cast",
    "array": "array",
    "atomic": "atomic atomic_int atomic_bool atomic_flag atomic_thread_fence memory_order memory_order_relaxed "
              "memory_order_acquire memory_order_release memory_order_acq_rel memory_order_seq_cst",
    "bit": "bit_cast popcount countl_zero countr_zero bit_width has_single_bit",
    "charconv": "from_chars to_chars",
    "chrono": "chrono",
    "cmath": "sqrt exp exp2 expm1 log log2 log10 log1p pow fabs floor ceil trunc round nearbyint rint lrint llrint "
             "lround llround isnan isinf isfinite signbit fmod remainder copysign nextafter sin cos tan asin acos "
             "atan atan2 sinh cosh tanh asinh acosh atanh erf erfc lgamma tgamma hypot fmax fmin fma ldexp frexp "
             "modf cbrt",
    "complex": "complex",
    "condition_variable": "condition_variable condition_variable_any",
    "cstdint": "int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t intmax_t "
               "uintmax_t",
    "cstdio": "printf fprintf snprintf sprintf puts fopen fclose fread fwrite FILE",
    "cstdlib": "malloc calloc realloc free aligned_alloc getenv abort exit strtol strtoll strtoul strtoull strtod "
               "atoi qsort",
    "cstring": "memcpy memset memmove memcmp strlen strcmp strncmp strchr strerror",
    "deque": "deque",
    "exception": "exception exception_ptr current_exception rethrow_exception make_exception_ptr terminate",
    "filesystem": "filesystem",
    "fstream": "ifstream ofstream fstream",
    "functional": "function bind hash ref cref invoke plus minus multiplies less greater equal_to not_fn",
    "future": "future promise async packaged_task shared_future",
    "initializer_list": "initializer_list",
    "iomanip": "setw setprecision setfill",
    "iostream": "cout cerr clog cin",
    "iterator": "back_inserter inserter distance advance next prev reverse_iterator iterator_traits",
    "limits": "numeric_limits",
    "list": "list",
    "map": "map multimap",
    "memory": "unique_ptr shared_ptr weak_ptr make_unique make_shared enable_shared_from_this static_pointer_cast "
              "dynamic_pointer_cast const_pointer_cast reinterpret_pointer_cast get_deleter addressof allocator "
              "align",
    "mutex": "mutex recursive_mutex timed_mutex lock_guard unique_lock scoped_lock once_flag call_once",
    "new": "bad_alloc nothrow align_val_t launder",
    "numeric": "accumulate iota inner_product partial_sum gcd lcm reduce exclusive_scan inclusive_scan "
               "transform_reduce",
    "optional": "optional nullopt nullopt_t make_optional bad_optional_access",
    "ostream": "ostream endl",
    "queue": "queue priority_queue",
    "random": "mt19937 mt19937_64 random_device uniform_real_distribution uniform_int_distribution "
              "normal_distribution bernoulli_distribution",
    "set": "set multiset",
    "shared_mutex": "shared_mutex shared_lock",
    "span": "span",
    "sstream": "ostringstream istringstream stringstream",
    "stack": "stack",
    "stdexcept": "logic_error runtime_error invalid_argument out_of_range length_error domain_error range_error "
                 "overflow_error underflow_error",
    "string": "string to_string stoi stol stoll stoul stoull stof stod",
    "string_view": "string_view",
    "system_error": "system_error error_code errc",
    "thread": "thread this_thread",
    "tuple": "tuple make_tuple tie tuple_size tuple_element apply forward_as_tuple",
    "type_traits": "is_same is_same_v enable_if enable_if_t conditional conditional_t decay decay_t is_integral "
                   "is_integral_v is_floating_point is_floating_point_v is_signed is_signed_v is_unsigned "
                   "is_unsigned_v is_arithmetic_v is_enum_v is_pointer_v is_const_v is_trivially_copyable_v "
                   "remove_reference_t remove_cv_t remove_cvref_t make_unsigned_t make_signed_t underlying_type_t "
                   "common_type_t invoke_result_t integral_constant true_type false_type",
    "typeinfo": "type_info bad_cast",
    "unordered_map": "unordered_map unordered_multimap",
    "unordered_set": "unordered_set unordered_multiset",
    "utility": "pair make_pair move forward swap exchange declval index_sequence make_index_sequence in_place "
               "piecewise_construct",
    "variant": "variant monostate holds_alternative get get_if visit bad_variant_access",
    "vector": "vector",
}
NAME_TO_HEADER = {n: h for h, names in HEADERS.items() for n in names.split()}
# also used unqualified (from the C headers' global namespace)
UNQUALIFIED = {n: "cstdint" for n in HEADERS["cstdint"].split()}
UNQUALIFIED_CALLS = {n: "cstring" for n in HEADERS["cstring"].split()}
INCLUDE = re.compile(r'^\s*#\s*include\s*<([^>]+)>', re.M)


def strip(src):
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r"/\*.*?\*/", "", src, flags=re.S)
    src = re.sub(r'"(?:\\.|[^"\\\n])*"', '""', src)
    return re.sub(r"'(?:\\.|[^'\\\n])*'", "''", src)


def used_headers(code):
    used = {}
    for m in re.finditer(r"\bstd::(\w+)", code):
        h = NAME_TO_HEADER.get(m.group(1))
        if h:
            used.setdefault(h, set()).add("std::" + m.group(1))
    for n, h in UNQUALIFIED.items():
        if re.search(r"(?<![:\w])" + n + r"\b", code):
            used.setdefault(h, set()).add(n)
    for n, h in UNQUALIFIED_CALLS.items():
        if re.search(r"(?<![:\w.>])" + n + r"\s*\(", code):
            used.setdefault(h, set()).add(n)
    return used


def provided(path):
    have = set(INCLUDE.findall(path.read_text()))
    friends = [path.with_suffix(".h")]
    if path.suffix == ".mm":
        friends.append(path.parent / "metal_internal.h")
    for f in friends:
        if f != path and f.exists():
            have |= set(INCLUDE.findall(f.read_text()))
    return have


def add_includes(path, headers):
    lines = path.read_text().split("\n")
    std = [i for i, line in enumerate(lines)
           if (m := INCLUDE.match(line)) and "/" not in m.group(1) and "." not in m.group(1)]
    if std:  # into the existing block of standard headers, sorted
        start = end = std[0]
        while end + 1 < len(lines) and INCLUDE.match(lines[end + 1]):
            end += 1
        lines[start:end + 1] = sorted(set(lines[start:end + 1] + [f"#include <{h}>" for h in headers]))
    else:  # a new block before the project's includes
        first = next(i for i, line in enumerate(lines) if line.startswith('#include "'))
        block = [f"#include <{h}>" for h in headers] + [""]
        if first > 0 and re.match(r"\s*#\s*(include|import)\s*<", lines[first - 1]):
            block = [""] + block[:-1]
        lines[first:first] = block
    path.write_text("\n".join(lines))


IOSTREAM_INCLUDE = re.compile(r"^\s*#\s*include\s*<(iostream|istream|ostream|sstream|fstream|iomanip)>", re.M)


def main(argv):
    fix = "--fix" in argv
    roots = [a for a in argv if a != "--fix"] or ["cpp"]
    files = []
    for r in map(pathlib.Path, roots):
        files += [r] if r.is_file() else [p for p in r.rglob("*") if p.suffix in (".h", ".hpp", ".cpp", ".mm", ".cu")]
    bad = streamed = 0
    for path in sorted(files):
        text = path.read_text()
        streams = IOSTREAM_INCLUDE.findall(text)
        if streams:
            streamed += 1
            print(f"{path}: includes <{'>, <'.join(streams)}>: no iostreams in the core (stdio, std::to_string)")
        have = provided(path)
        missing = {h: sorted(n) for h, n in used_headers(strip(text)).items() if h not in have}
        if not missing:
            continue
        bad += 1
        print(f"{path}: " + "; ".join(f"<{h}> for {', '.join(n)}" for h, n in sorted(missing.items())))
        if fix:
            add_includes(path, sorted(missing))
    if bad:
        print(f"check_includes.py: {bad} file(s) use std facilities without their header"
              + (" (fixed)" if fix else "; `python3 tools/check_includes.py --fix` adds them"))
    if streamed:
        print(f"check_includes.py: {streamed} file(s) include iostream headers")
    return 1 if (bad and not fix) or streamed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
