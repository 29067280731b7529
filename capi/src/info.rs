//! Info objects: ordered (key, value) lists.

/// An info object.
#[derive(Debug, Default, Clone)]
pub struct InfoObj {
    pub entries: Vec<(String, String)>,
}
