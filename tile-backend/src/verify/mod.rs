pub fn verify() {}
