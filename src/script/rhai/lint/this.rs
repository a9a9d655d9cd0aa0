//! Whether a function body changes `this`: a user-defined method that does so, called on a
//! captured variable, writes what it captured (`shared.rs` follows those calls).

use ::rhai::{AST, ASTNode, Expr, Stmt};

use crate::script::rhai::sandbox::MUTATING_METHODS;

/// Whether a function body assigns `this` or calls a builtin that changes it.
pub(super) fn writes_this(body: &AST) -> bool {
    let mut found = false;
    body.walk(&mut |path: &[ASTNode]| {
        match path.last() {
            Some(ASTNode::Stmt(Stmt::Assignment(assignment))) if is_rooted_at_this(&assignment.1.lhs) => {
                found = true;
            }
            Some(ASTNode::Expr(Expr::Dot(chain, ..))) => {
                if matches!(chain.lhs, Expr::ThisPtr(..))
                    && let Expr::MethodCall(call, _) = &chain.rhs
                    && MUTATING_METHODS.contains(&call.name.as_str())
                {
                    found = true;
                }
            }
            _ => {}
        }
        !found
    });
    found
}

fn is_rooted_at_this(expr: &Expr) -> bool {
    match expr {
        Expr::ThisPtr(..) => true,
        Expr::Dot(chain, ..) | Expr::Index(chain, ..) => is_rooted_at_this(&chain.lhs),
        _ => false,
    }
}
