//! The top level of a PTX module, read just far enough to JIT-compile some of its
//! kernels without the others.
//!
//! The driver JIT-compiles a whole PTX module when it is loaded: a module of 400
//! kernels costs seconds even when one of them is launched. [`PtxModule::extract`]
//! writes a module that holds the kernels asked for, the device functions they
//! reach (through calls or any other reference), and every other top-level
//! statement (the header, variables, `.extern` declarations) byte for byte.
//!
//! Splitting is only sound when no kernel can observe that the others live in
//! another module. A module-scope `.global` or `.const` variable is one copy per
//! module: a counter one kernel writes and another reads, or a `__constant__` the
//! host sets through the module, would silently stop being shared.
//! [`PtxModule::splittable`] is true only when every variable that code names is
//! initialized and only ever loaded (`ld`, `ldu`), such as C++ `constexpr`
//! members, or is one of the CUDA math library's constant tables (initialized,
//! named `__cudart_*`: `sin` and `cos` take their addresses, and nothing writes
//! them). Textures, surfaces and `.extern` variables also keep the module whole.
//!
//! The reader is linear in the text and never fails: text it does not understand
//! is kept as it is (the driver's own parser decides), and a kernel it cannot find
//! makes [`PtxModule::extract`] return `None` (the caller loads the whole module).

use std::collections::HashMap;
use std::ops::Range;

/// What one top-level statement is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Kind {
    /// A kernel (`.entry`), declared or defined.
    Entry,
    /// A device function (`.func`), declared or defined; `.extern` ones are kept.
    Func { external: bool },
    /// A `.global` or `.const` variable.
    Variable { initialized: bool, external: bool },
    /// Something that keeps the module whole when code names it (`.tex`,
    /// `.surfref`, `.texref`, `.samplerref`).
    Binding,
    /// Anything else: header directives, `.shared` variables, debug sections.
    Other,
}

/// One top-level statement: its bytes, what it is, the name it declares.
#[derive(Clone, Debug)]
struct Item {
    span: Range<usize>,
    kind: Kind,
    name: Option<String>,
    /// Identifier tokens in the statement's body (after its first `{`, or after
    /// `=` for a variable), each with the start of the instruction it is in.
    refs: Vec<Ref>,
}

#[derive(Clone, Debug)]
struct Ref {
    token: Range<usize>,
    instruction: usize,
}

/// A PTX module's top-level statements, read to JIT-compile some of its kernels
/// without the others: the loader splits modules with it (see
/// [`loader`](crate::loader)).
///
/// Splitting is only sound when no kernel can observe that the others live in
/// another module: [`PtxModule::splittable`] is false when kernels name a
/// module variable that may be written (a `__device__` counter, a `__constant__`
/// the host sets). Text the reader does not understand is kept as it is; a
/// kernel it cannot find makes [`PtxModule::extract`] return `None`.
///
/// ```
/// use kiln_cuda::ptx::PtxModule;
///
/// let ptx = ".version 9.0\n.target sm_80\n.address_size 64\n\
///            .func helper() { ret; }\n\
///            .visible .entry a() { call.uni helper, (); ret; }\n\
///            .visible .entry b() { ret; }\n";
/// let module = PtxModule::parse(ptx);
/// assert_eq!(module.entries().collect::<Vec<_>>(), ["a", "b"]);
/// assert!(module.splittable());
/// let b = module.extract(&["b"]).expect("b is defined");
/// assert!(b.contains(".entry b") && !b.contains(".entry a") && !b.contains("helper"));
/// ```
#[derive(Debug)]
pub struct PtxModule<'a> {
    text: &'a str,
    items: Vec<Item>,
}

/// The prefix of the CUDA math library's constant tables (`__cudart_i2opi_f`,
/// `__cudart_sin_cos_coeffs`), whose addresses `sin` and `cos` take.
const MATH_TABLE_PREFIX: &str = "__cudart_";

/// Directives that end at the end of their line (no `;`).
const LINE_DIRECTIVES: [&str; 5] = [".version", ".target", ".address_size", ".file", ".loc"];

impl<'a> PtxModule<'a> {
    /// Reads the top level of `text`.
    pub fn parse(text: &'a str) -> PtxModule<'a> {
        PtxModule {
            text,
            items: Scanner::new(text).run(),
        }
    }

    /// The kernels the module defines, in order.
    pub fn entries(&self) -> impl Iterator<Item = &str> {
        self.items
            .iter()
            .filter(|item| item.kind == Kind::Entry && self.is_definition(item))
            .filter_map(|item| item.name.as_deref())
    }

    fn is_definition(&self, item: &Item) -> bool {
        self.text[item.span.clone()].trim_end().ends_with('}')
    }

    /// Whether kernels of this module may be JIT-compiled in modules of their own
    /// (see the module documentation).
    pub fn splittable(&self) -> bool {
        let variables: HashMap<&str, &Kind> = self
            .items
            .iter()
            .filter(|item| matches!(item.kind, Kind::Variable { .. } | Kind::Binding))
            .filter_map(|item| Some((item.name.as_deref()?, &item.kind)))
            .collect();
        if variables.is_empty() {
            return true;
        }
        let code = self
            .items
            .iter()
            .filter(|item| matches!(item.kind, Kind::Entry | Kind::Func { .. }));
        for item in code {
            for r in &item.refs {
                let Some(kind) = variables.get(&self.text[r.token.clone()]) else {
                    continue;
                };
                let name = &self.text[r.token.clone()];
                let initialized = matches!(
                    kind,
                    Kind::Variable {
                        initialized: true,
                        external: false
                    }
                );
                let read_only = initialized
                    && (name.starts_with(MATH_TABLE_PREFIX)
                        || is_load(&self.text[r.instruction..r.token.start]));
                if !read_only {
                    return false;
                }
            }
        }
        true
    }

    /// The module with only the kernels `keep` (lowered names) and what they
    /// reach (device functions and module variables, through code or
    /// initializers); `None` when one of them is not defined here. Every
    /// other statement (the header, `.extern` declarations, textures) is
    /// kept byte for byte; functions and variables nothing kept names are
    /// left out (a library's PTX declares thousands of C++ `constexpr`
    /// members: each module would compile and load them all).
    pub fn extract(&self, keep: &[&str]) -> Option<String> {
        // The symbols an extract may leave out: defined functions and
        // variables.
        let droppable = |item: &Item| match item.kind {
            Kind::Entry | Kind::Func { external: false } => self.is_definition(item),
            Kind::Variable {
                external: false, ..
            } => true,
            _ => false,
        };
        let symbols: HashMap<&str, usize> = self
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| droppable(item))
            .filter_map(|(i, item)| Some((item.name.as_deref()?, i)))
            .collect();
        let mut kept = vec![false; self.items.len()];
        let mut work: Vec<usize> = Vec::new();
        for name in keep {
            let &index = symbols.get(name)?;
            if self.items[index].kind != Kind::Entry {
                return None;
            }
            work.push(index);
        }
        // Roots: the kernels asked for, and every statement that is not a
        // symbol an extract may leave out (an `.extern` declaration, a
        // texture, the header).
        for (i, item) in self.items.iter().enumerate() {
            if !droppable(item) && !matches!(item.kind, Kind::Entry | Kind::Func { .. }) {
                work.push(i);
            }
        }
        while let Some(i) = work.pop() {
            if std::mem::replace(&mut kept[i], true) {
                continue;
            }
            for r in &self.items[i].refs {
                if let Some(&target) = symbols.get(&self.text[r.token.clone()])
                    && !kept[target]
                {
                    work.push(target);
                }
            }
        }
        // A declaration (a prototype) goes with its definition.
        let reached: HashMap<&str, bool> = symbols
            .iter()
            .map(|(name, &index)| (*name, kept[index]))
            .collect();
        let mut out = String::with_capacity(self.text.len());
        let mut at = 0;
        for (i, item) in self.items.iter().enumerate() {
            let keep_it = match item.kind {
                Kind::Entry
                | Kind::Func { external: false }
                | Kind::Variable {
                    external: false, ..
                } => {
                    kept[i]
                        || item
                            .name
                            .as_deref()
                            .and_then(|name| reached.get(name))
                            .copied()
                            .unwrap_or(true)
                }
                _ => true,
            };
            if !keep_it {
                out.push_str(&self.text[at..item.span.start]);
                at = item.span.end;
            }
        }
        out.push_str(&self.text[at..]);
        Some(out)
    }
}

/// Whether the instruction text before a token is a load (`ld.*`, `ldu.*`), after
/// any labels and a guard predicate.
fn is_load(instruction: &str) -> bool {
    instruction
        .split_whitespace()
        .find(|word| !word.ends_with(':') && !word.starts_with('@'))
        .is_some_and(|opcode| opcode.starts_with("ld.") || opcode.starts_with("ldu."))
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'$' | b'%')
}

/// One pass over the text: statements at depth 0, identifier tokens inside them.
struct Scanner<'a> {
    text: &'a str,
    bytes: &'a [u8],
    items: Vec<Item>,
}

impl<'a> Scanner<'a> {
    fn new(text: &'a str) -> Scanner<'a> {
        Scanner {
            text,
            bytes: text.as_bytes(),
            items: Vec::new(),
        }
    }

    fn run(mut self) -> Vec<Item> {
        let bytes = self.bytes;
        let mut i = 0;
        let mut start = 0; // the current statement's first byte
        let mut braces = 0usize;
        let mut parens = 0usize;
        let mut body: Option<usize> = None; // where the statement's body starts
        let mut initializer = false; // the body is a variable's `= ...`
        let mut instruction = 0;
        let mut refs: Vec<Ref> = Vec::new();
        let mut line_directive = None::<bool>;
        while i < bytes.len() {
            let b = bytes[i];
            // Comments and strings hold no structure.
            if b == b'/' && bytes.get(i + 1) == Some(&b'/') {
                i = memchr(b'\n', bytes, i).unwrap_or(bytes.len());
                continue;
            }
            if b == b'/' && bytes.get(i + 1) == Some(&b'*') {
                i = find(b"*/", bytes, i + 2).map_or(bytes.len(), |end| end + 2);
                continue;
            }
            if b == b'"' {
                let mut j = i + 1;
                while j < bytes.len() && bytes[j] != b'"' && bytes[j] != b'\n' {
                    j += if bytes[j] == b'\\' { 2 } else { 1 };
                }
                i = (j + 1).min(bytes.len());
                continue;
            }
            if braces == 0 && parens == 0 && line_directive.is_none() && !b.is_ascii_whitespace() {
                let word_end = (i..bytes.len())
                    .find(|&j| !(is_ident_byte(bytes[j]) || bytes[j] == b'.'))
                    .unwrap_or(bytes.len());
                line_directive = Some(LINE_DIRECTIVES.contains(&&self.text[i..word_end]));
            }
            if is_ident_byte(b) {
                let end = (i..bytes.len())
                    .find(|&j| !is_ident_byte(bytes[j]))
                    .unwrap_or(bytes.len());
                if body.is_some() {
                    refs.push(Ref {
                        token: i..end,
                        instruction,
                    });
                }
                i = end;
                continue;
            }
            let mut end_here = false;
            match b {
                b'(' => parens += 1,
                b')' => parens = parens.saturating_sub(1),
                b'{' => {
                    if braces == 0 && parens == 0 && body.is_none() {
                        body = Some(i + 1);
                    }
                    braces += 1;
                    instruction = i + 1;
                }
                b'}' => {
                    braces = braces.saturating_sub(1);
                    instruction = i + 1;
                    end_here = braces == 0 && parens == 0 && !initializer;
                }
                b'=' if braces == 0 && parens == 0 && body.is_none() => {
                    body = Some(i + 1);
                    initializer = true;
                    instruction = i + 1;
                }
                b';' => {
                    instruction = i + 1;
                    end_here = braces == 0 && parens == 0;
                }
                b'\n' => end_here = braces == 0 && parens == 0 && line_directive == Some(true),
                _ => {}
            }
            i += 1;
            if end_here {
                self.push(start..i, body, initializer, std::mem::take(&mut refs));
                start = i;
                body = None;
                initializer = false;
                line_directive = None;
            }
        }
        if !self.text[start..].trim().is_empty() {
            self.push(start..bytes.len(), body, initializer, refs);
        }
        self.items
    }

    fn push(&mut self, span: Range<usize>, body: Option<usize>, initializer: bool, refs: Vec<Ref>) {
        let head_end = body.map_or(span.end, |at| at - 1);
        let head = &self.text[span.start..head_end.max(span.start)];
        let (kind, name) = classify(head, initializer);
        self.items.push(Item {
            span,
            kind,
            name,
            refs,
        });
    }
}

/// What a statement declares, from its head (the text before its body).
fn classify(head: &str, initialized: bool) -> (Kind, Option<String>) {
    let code: String = strip_comments(head);
    let words: Vec<&str> = code.split_whitespace().collect();
    let has = |word: &str| words.contains(&word);
    let external = has(".extern");
    if let Some(at) = code.find(".entry") {
        return (Kind::Entry, name_after(&code[at + ".entry".len()..]));
    }
    if let Some(at) = code.find(".func") {
        let mut rest = code[at + ".func".len()..].trim_start();
        if rest.starts_with('(') {
            // The return parameter list comes before the name.
            rest = rest.find(')').map_or("", |close| &rest[close + 1..]);
        }
        return (Kind::Func { external }, name_after(rest));
    }
    if [".tex", ".surfref", ".texref", ".samplerref"]
        .iter()
        .any(|w| has(w))
    {
        return (Kind::Binding, variable_name(&code));
    }
    if has(".global") || has(".const") {
        return (
            Kind::Variable {
                initialized,
                external,
            },
            variable_name(&code),
        );
    }
    (Kind::Other, None)
}

fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(tail) = rest.strip_prefix("//") {
            rest = tail.find('\n').map_or("", |at| &tail[at..]);
        } else if let Some(tail) = rest.strip_prefix("/*") {
            rest = tail.find("*/").map_or("", |at| &tail[at + 2..]);
        } else {
            let c = rest.chars().next().unwrap_or(' ');
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// The identifier at the start of `rest` (after blanks).
fn name_after(rest: &str) -> Option<String> {
    let rest = rest.trim_start();
    let end = rest
        .bytes()
        .position(|b| !is_ident_byte(b))
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_owned())
}

/// A variable's name: the last identifier of its declaration, before any `[`
/// or `;`.
fn variable_name(code: &str) -> Option<String> {
    let decl = code.split(['[', ';']).next().unwrap_or(code);
    let word = decl.split_whitespace().last()?;
    name_after(word)
}

fn memchr(needle: u8, bytes: &[u8], from: usize) -> Option<usize> {
    bytes[from..]
        .iter()
        .position(|&b| b == needle)
        .map(|at| from + at)
}

fn find(needle: &[u8], bytes: &[u8], from: usize) -> Option<usize> {
    bytes
        .get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "//\n// Generated by NVIDIA NVVM Compiler\n//\n\n.version 9.0\n.target sm_80\n.address_size 64\n\n\t// .globl\tk\n";

    fn module(body: &str) -> String {
        format!("{HEADER}{body}")
    }

    const TWO_KERNELS: &str = "
.extern .func  (.param .b32 func_retval0) vprintf
(
\t.param .b64 vprintf_param_0,
\t.param .b64 vprintf_param_1
)
;
.global .align 1 .b8 $str[4] = {110, 101, 103, 0};
.global .align 8 .u64 _ZN4cuda3std3__417integral_constantImLm2EE5valueE = 2;
.func  (.param .b32 func_retval0) _Z6helperf(
\t.param .b32 _Z6helperf_param_0
)
{
\t.reg .f32 \t%f<3>;
\tld.param.f32 \t%f1, [_Z6helperf_param_0];
\tadd.f32 \t%f2, %f1, %f1;
\tst.param.b32 \t[func_retval0], %f2;
\tret;
}
.func _Z6unusedv()
{
\tret;
}
.visible .entry a(
\t.param .u64 a_param_0
)
.maxntid 128, 1, 1
{
\t.reg .b64 \t%rd<3>;
\t.reg .f32 \t%f<3>;
\tld.global.u64 \t%rd1, [_ZN4cuda3std3__417integral_constantImLm2EE5valueE];
$L__BB0_2:
\t@%p1 ld.global.u8 \t%rs1, [$str];
\t{ // callseq 0, 0
\t.param .b32 param0;
\tst.param.f32 \t[param0], %f1;
\t.param .b32 retval0;
\tcall.uni (retval0), _Z6helperf, (param0);
\t}
\tret;
}
\t// .globl\tb
.weak .entry b()
{
\tcall.uni _Z6unusedv, ();
\tret;
}
";

    #[test]
    fn kernels_are_found_with_their_names() {
        let text = module(TWO_KERNELS);
        let ptx = PtxModule::parse(&text);
        assert_eq!(ptx.entries().collect::<Vec<_>>(), ["a", "b"]);
        assert!(ptx.splittable(), "read-only initialized globals only");
    }

    #[test]
    fn an_extract_keeps_the_kernel_what_it_calls_and_every_declaration() {
        let text = module(TWO_KERNELS);
        let ptx = PtxModule::parse(&text);
        let a = ptx.extract(&["a"]).unwrap();
        assert!(a.starts_with(HEADER), "{a}");
        assert!(a.contains(".visible .entry a("));
        assert!(a.contains("_Z6helperf("), "called by a");
        assert!(a.contains("vprintf"), "extern declarations stay");
        assert!(a.contains("$str[4] = {110, 101, 103, 0};"), "a loads it");
        assert!(
            a.contains("integral_constantImLm2EE5valueE = 2"),
            "a loads it"
        );
        assert!(!a.contains(".entry b"), "{a}");
        assert!(!a.contains("_Z6unusedv"), "reached only from b: {a}");
        // Another parse of the extract sees exactly that.
        let again = PtxModule::parse(&a);
        assert_eq!(again.entries().collect::<Vec<_>>(), ["a"]);

        let b = ptx.extract(&["b"]).unwrap();
        assert!(b.contains(".weak .entry b()"));
        assert!(b.contains(".func _Z6unusedv()"));
        assert!(
            !b.contains(".entry a(") && !b.contains("_Z6helperf("),
            "{b}"
        );
        assert!(
            !b.contains("$str") && !b.contains("valueE"),
            "variables only a names: {b}"
        );
        assert!(b.contains("vprintf"), "extern declarations stay");
        let both = ptx.extract(&["a", "b"]).unwrap();
        assert_eq!(both, text, "keeping everything changes nothing");
    }

    #[test]
    fn a_kernel_not_defined_here_gives_no_extract() {
        let text = module(TWO_KERNELS);
        let ptx = PtxModule::parse(&text);
        assert_eq!(ptx.extract(&["c"]), None);
        assert_eq!(
            ptx.extract(&["_Z6helperf"]),
            None,
            "a device function is no kernel"
        );
    }

    #[test]
    fn shared_state_keeps_the_module_whole() {
        let kernel =
            |instruction: &str| format!(".visible .entry k()\n{{\n\t{instruction}\n\tret;\n}}\n");
        let cases = [
            // A counter kernels write.
            (
                ".global .align 4 .u32 counter;\n",
                "mov.u64 \t%rd1, counter;",
            ),
            (
                ".global .align 4 .u32 counter;\n",
                "atom.global.add.u32 \t%r1, [counter], 1;",
            ),
            // A __constant__ the host sets (no initializer), even if only loaded.
            (
                ".const .align 4 .f32 scale;\n",
                "ld.const.f32 \t%f1, [scale];",
            ),
            // Initialized, but its address taken or written.
            (
                ".global .align 4 .u32 t = 1;\n",
                "st.global.u32 \t[t], %r1;",
            ),
            (
                ".global .align 4 .u32 t = 1;\n",
                "cvta.global.u64 \t%rd1, t;",
            ),
            // Defined elsewhere, or bound by the host.
            (
                ".extern .global .align 4 .u32 e;\n",
                "ld.global.u32 \t%r1, [e];",
            ),
            (
                ".global .texref tex;\n",
                "tex.1d.v4.f32.s32 \t{%f1, %f2, %f3, %f4}, [tex, {%r1}];",
            ),
        ];
        for (variable, instruction) in cases {
            let text = module(&format!("{variable}{}", kernel(instruction)));
            assert!(
                !PtxModule::parse(&text).splittable(),
                "{variable} {instruction}"
            );
        }
        // An initialized table only loaded, and variables no code names, are fine.
        let text = module(&format!(
            ".global .align 4 .b8 table[8] = {{1, 0, 0, 0, 2, 0, 0, 0}};\n.const .align 4 .f32 unused;\n{}",
            kernel("ld.global.nc.u32 \t%r1, [table+4];")
        ));
        assert!(PtxModule::parse(&text).splittable());
        // So is the math library's table whose address `sinf` takes, but not
        // another's.
        for (name, splittable) in [("__cudart_i2opi_f", true), ("my_table", false)] {
            let text = module(&format!(
                ".global .align 4 .b8 {name}[4] = {{65, 144, 67, 60}};\n{}",
                kernel(&format!("mov.u64 \t%rd46, {name};"))
            ));
            assert_eq!(PtxModule::parse(&text).splittable(), splittable, "{name}");
        }
    }

    #[test]
    fn comments_and_strings_hide_no_structure() {
        let text = module(
            "/* .visible .entry fake() { } */\n.file 1 \"/tmp/a{b.cu\"\n.visible .entry k()\n{\n\t// }\n\tret;\n}\n",
        );
        let ptx = PtxModule::parse(&text);
        assert_eq!(ptx.entries().collect::<Vec<_>>(), ["k"]);
        assert_eq!(ptx.extract(&["k"]).unwrap(), text);
    }

    #[test]
    fn any_text_is_read_without_panicking_in_linear_time() {
        let mut rng = 0x2545_F491_4F6C_DD1Du64;
        let alphabet = b"{}();=/*\"\n .entryfuncglobalconst[]ld.u32 ab$%";
        for len in [0, 1, 7, 64, 1000] {
            for _ in 0..200 {
                let text: String = (0..len)
                    .map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        alphabet[(rng % alphabet.len() as u64) as usize] as char
                    })
                    .collect();
                let ptx = PtxModule::parse(&text);
                let names: Vec<String> = ptx.entries().map(str::to_owned).collect();
                let _ = ptx.splittable();
                for name in &names {
                    let _ = ptx.extract(&[name]);
                }
            }
        }
        // Deep nesting and an unterminated comment.
        let text = format!("{}{}/*", "{".repeat(100_000), "(".repeat(100_000));
        assert_eq!(PtxModule::parse(&text).entries().count(), 0);
    }
}
