//! The input of `include_image!`: `"path"` or `crate = some::path, "path"`.

use syn::parse::{Parse, ParseStream};
use syn::{LitStr, Path, Token};

/// Parsed arguments of `include_image!`.
pub(crate) struct Args {
    /// The crate whose hidden `__private` module holds the runtime items.
    pub(crate) runtime: Path,
    /// The image path as written.
    pub(crate) path: LitStr,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let runtime = if input.peek(Token![crate]) {
            input.parse::<Token![crate]>()?;
            input.parse::<Token![=]>()?;
            let runtime = input.call(Path::parse_mod_style)?;
            input.parse::<Token![,]>()?;
            runtime
        } else {
            syn::parse_quote!(::kiln)
        };
        let path: LitStr = input.parse()?;
        if input.peek(Token![,]) {
            input.parse::<Token![,]>()?;
        }
        if !input.is_empty() {
            return Err(
                input.error("include_image! takes one image path: include_image!(\"name.kimg\")")
            );
        }
        Ok(Args { runtime, path })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::ToTokens;

    fn runtime_of(input: &str) -> String {
        let args: Args = syn::parse_str(input).unwrap();
        args.runtime.to_token_stream().to_string().replace(' ', "")
    }

    #[test]
    fn the_runtime_defaults_to_the_facade() {
        assert_eq!(runtime_of(r#""a.kimg""#), "::kiln");
        let args: Args = syn::parse_str(r#""a.kimg","#).unwrap();
        assert_eq!(args.path.value(), "a.kimg");
    }

    #[test]
    fn the_runtime_can_be_named() {
        assert_eq!(
            runtime_of(r#"crate = ::kiln_core, "a.kimg""#),
            "::kiln_core"
        );
    }

    #[test]
    fn extra_or_missing_arguments_are_errors() {
        assert!(syn::parse_str::<Args>(r#""a.kimg", "b.kimg""#).is_err());
        assert!(syn::parse_str::<Args>("").is_err());
        assert!(syn::parse_str::<Args>("a_kimg").is_err());
    }
}
